"""Every model file gptwatch reads or writes, each format's reading and writing together:

- `checkpoint`: gptwatch's own `ckpt.pt`, and what every format shares (`CheckpointError`, `read_torch`, `Loaded`);
- `sources`: where a model comes from (`identify`: scratch, resume, a gptwatch or nanoGPT checkpoint, a Hugging
  Face folder or hub name) and `load_model`, which reads any of them;
- `layout`: where gptwatch's weights stand in GPT-2's, Qwen3's and TransformerLens's layouts, and what no target
  holds; `huggingface`: Hugging Face folders with their tokenizer; `nanogpt`: nanoGPT's checkpoints;
  `transformerlens`: a HookedTransformer; `export`: `sample.py --export`; `optional`: the optional libraries.

transformer-lens and transformers are optional (requirements-interop.txt) and take seconds to import, so
nothing here imports them until a conversion runs. Nothing here imports the trainer.
"""

from formats.checkpoint import CheckpointError, Loaded, checkpoint_path, load_checkpoint, validate
from formats.sources import identify, load_model

__all__ = ["CheckpointError", "Loaded", "checkpoint_path", "identify", "load_checkpoint", "load_model", "validate"]
