"""Reading checkpoints, below the trainer: sampling, export, inspection and the benchmarks read weights
here without importing `trainer`, which writes them (`trainer.checkpoint`) and checks a resume."""

from formats.gptwatch import Loaded
from formats.load import load_model
from formats.read import (
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    checkpoint_path,
    load_checkpoint,
    load_weights,
    unusable,
    validate,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "CheckpointError", "Loaded", "checkpoint_path", "load_checkpoint",
           "load_model", "load_weights", "unusable", "validate"]
