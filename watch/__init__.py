"""Watching attention: one pass (`pipeline`) captures each probe set once and reads every score; what they say is
read once (`reading`), and every view reads that. Each module's docstring says its one job. Nothing is imported
here, so importing one module (say `watch.heads` for plain sampling) pulls in no other module of the package.
"""
