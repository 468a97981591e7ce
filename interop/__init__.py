"""Carrying a model out of gptwatch: the same function as a TransformerLens `HookedTransformer`, or as
a Hugging Face transformers model in a `save_pretrained` folder. Each module has one job:

- `parts`: which part of a model a target has no exact equivalent for (the refusals, in one place);
- `optional`: importing the optional libraries, or one line saying what to install;
- `transformerlens`: `to_hooked_transformer`, and the file `sample.py --export tl` writes;
- `huggingface`: `to_hf_model` (GPT2LMHeadModel or Qwen3ForCausalLM), and the folder `--export hf` writes;
- `hf_tokenizer`: a Hugging Face tokenizer that gives gptwatch's own token ids;
- `export`: `sample.py --export`, from the path checks to the written file or folder.

transformer-lens and transformers are optional (requirements-interop.txt) and take seconds to import,
so nothing here imports them until a conversion runs: the rest of the project works without them.
"""
