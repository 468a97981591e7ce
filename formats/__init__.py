"""Every model file gptwatch reads or writes: one module per format (checkpoint.py: gptwatch's own; nanogpt.py,
huggingface.py, transformerlens.py), each filling in one `Format` record (format.py), all registered once in
`sources.FORMATS`, through which `sources.load_model` reads any of them and `export.export` writes. transformer-lens
and transformers are optional (requirements-interop.txt) and take seconds to import, so nothing here imports them
until a conversion runs. Nothing here imports the trainer.
"""

from formats.checkpoint import checkpoint_path, load_checkpoint, validate
from formats.format import CheckpointError, Loaded
from formats.sources import identify, load_model

__all__ = ["CheckpointError", "Loaded", "checkpoint_path", "identify", "load_checkpoint", "load_model", "validate"]
