"""GPT-2-family models by their Hugging Face hub names, fetched once into the usual Hugging Face cache
(`huggingface_hub.snapshot_download`: `HF_HOME`, by default ~/.cache/huggingface) and read from there as
any local folder is (formats/huggingface.py). Only their config and weights are fetched.

Their sizes are known here, so a model too large for this machine's memory is refused before anything is
downloaded.
"""

from __future__ import annotations

from pathlib import Path

import torch

import formats.optional as optional
from formats.checkpoint import CheckpointError
from model.config import GPTConfig
from model.memory import parameter_count, shortfall, size_text

# name -> (hub repository, n_layer, n_head, n_embd); every one has GPT-2's vocabulary and 1,024 positions
HUB_MODELS = {
    "gpt2": ("openai-community/gpt2", 12, 12, 768),
    "gpt2-medium": ("openai-community/gpt2-medium", 24, 16, 1024),
    "gpt2-large": ("openai-community/gpt2-large", 36, 20, 1280),
    "gpt2-xl": ("openai-community/gpt2-xl", 48, 25, 1600),
    "distilgpt2": ("distilbert/distilgpt2", 6, 12, 768),
}
FILES = ["config.json", "model.safetensors"]   # each of them has its weights as safetensors
BYTES_PER_PARAMETER = 4                   # float32, as gptwatch runs a model from elsewhere
LOCAL_FOLDER_HELP = "or pass a local folder holding config.json and model.safetensors (or pytorch_model.bin)"


def hub_name(source: str) -> str | None:
    """The hub model `source` names ("gpt2", or its repository "openai-community/gpt2"); None for any other."""
    for name, (repository, *_) in HUB_MODELS.items():
        if source in (name, repository):
            return name
    return None


def hub_config(name: str) -> GPTConfig:
    """The config of a hub model, known without fetching it."""
    _, n_layer, n_head, n_embd = HUB_MODELS[name]
    return GPTConfig(vocab_size=50257, block_size=1024, n_layer=n_layer, n_head=n_head, n_embd=n_embd, bias=True,
                     qkv_bias=True, activation="gelu_tanh")


def fetch(name: str, device: torch.device) -> Path:
    """The folder in the Hugging Face cache holding hub model `name`, downloaded there first when it is not
    yet, once the model is known to fit in memory."""
    check_fits(hub_config(name), name, device)
    hub = optional.huggingface_hub(f"fetching {name} from the Hugging Face hub")
    repository = HUB_MODELS[name][0]
    try:
        return Path(hub.snapshot_download(repository, allow_patterns=FILES))
    except Exception as exc:  # offline, unreachable, renamed or refused: the hub's errors come as many types
        # an HTTP answer is a refusal (its errors are OSErrors too); any other failure to connect means offline
        answered = any(kind.__name__ == "HTTPError" for kind in type(exc).__mro__)
        offline = not answered and isinstance(exc, (OSError, ConnectionError, TimeoutError))
        why = ("this machine is offline, or cannot reach the hub, and the model is not in the Hugging Face cache "
               "yet" if offline else f"the hub refused to serve it ({type(exc).__name__})")
        raise CheckpointError(f"cannot fetch {name} ({repository}) from the Hugging Face hub: {why}; connect to the "
                              f"internet once (it is then kept in the Hugging Face cache), {LOCAL_FOLDER_HELP}") \
            from None


def check_fits(config: GPTConfig, what: str, device: torch.device) -> None:
    """Refuses, before anything is downloaded or allocated, a model from elsewhere whose weights alone (float32)
    exceed the memory free here: on the CPU, where it is read, and on `device`, where it runs."""
    n = parameter_count(config)
    need = n * BYTES_PER_PARAMETER
    for where in dict.fromkeys((torch.device("cpu"), device)):
        free = shortfall(need, where)
        if free is not None:
            raise CheckpointError(f"{what} has {n:,} parameters, which need at least {size_text(need)} of memory "
                                  f"(float32), and {size_text(free)} is free on {where.type}; use a smaller model, "
                                  f"or a machine with more memory")
