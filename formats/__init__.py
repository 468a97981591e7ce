"""Every model file gptwatch reads or writes, each format's reading and writing together:

- `checkpoint`: gptwatch's own `ckpt.pt` (written atomically, read without running pickled code), and what every
  format shares: `CheckpointError`, the one reader of a PyTorch file, `Loaded`;
- `sources`: where a model comes from (`identify`: scratch, resume, a gptwatch or nanoGPT checkpoint, a Hugging
  Face folder or hub name) and `load_model`, which reads any of them;
- `layout`: the tables of where gptwatch's weights stand in GPT-2's, Qwen3's and TransformerLens's layouts, one
  table for both ways;
- `huggingface`: Hugging Face folders, read (GPT-2 family) and written (GPT2LMHeadModel, Qwen3ForCausalLM);
  `hub`: models fetched by hub name; `nanogpt`: nanoGPT's checkpoints; `transformerlens`: a HookedTransformer;
- `parts`: which part of a model a target cannot hold (the refusals, in one place); `export`: `sample.py
  --export`; `hf_tokenizer`: a Hugging Face tokenizer giving gptwatch's ids; `optional`: the optional libraries.

transformer-lens and transformers are optional (requirements-interop.txt) and take seconds to import, so
nothing here imports them until a conversion runs: the rest of the project works without them. Nothing here
imports the trainer.
"""

from formats.checkpoint import CheckpointError, Loaded, checkpoint_path, load_checkpoint, validate
from formats.sources import identify, load_model

__all__ = ["CheckpointError", "Loaded", "checkpoint_path", "identify", "load_checkpoint", "load_model", "validate"]
