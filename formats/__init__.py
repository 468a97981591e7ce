"""Every model file gptwatch reads or writes, each format's reading and writing together (`sources.load_model`
reads any of them). transformer-lens and transformers are optional (requirements-interop.txt) and take seconds to
import, so nothing here imports them until a conversion runs. Nothing here imports the trainer.
"""

from formats.checkpoint import CheckpointError, Loaded, checkpoint_path, load_checkpoint, validate
from formats.sources import identify, load_model

__all__ = ["CheckpointError", "Loaded", "checkpoint_path", "identify", "load_checkpoint", "load_model", "validate"]
