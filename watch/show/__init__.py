"""The views: what the watch shows of a pass's `Reading`. The terminal report (`report`), heatmaps (`heatmaps`),
TensorBoard (`tensorboard`) and the offline attention page (`page`); none of them runs the model.
"""
