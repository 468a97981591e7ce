"""Where a model comes from, said once: `identify` turns a path or name into a `Source` (a gptwatch or nanoGPT
checkpoint, a Hugging Face folder, or a hub name, fetched once into the Hugging Face cache), and `load_model` reads
any source into a gptwatch model that computes the same function.

A checkpoint file is read once, when it is identified (a nanoGPT checkpoint and gptwatch's are both `ckpt.pt`:
its contents tell them apart). Each model is refused in one line, before anything large is read, downloaded or
allocated, when gptwatch's model cannot compute it exactly or it cannot fit in memory.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch

from errors import UsageError, warn
from formats.checkpoint import CheckpointError, Loaded, check_memory, is_torch_archive, load_gptwatch, read_torch
from formats.huggingface import CONFIG, gpt_config, library, read_folder
from formats.nanogpt import read_nanogpt
from model.config import GPTConfig
from model.gpt import GPT
from model.memory import parameter_count, size_text

GPTWATCH, NANOGPT, HUGGINGFACE, HUB = "gptwatch", "nanogpt", "huggingface", "hub"
CHECKPOINT = "ckpt.pt"

# name -> (hub repository, n_layer, n_head, n_embd); every one has GPT-2's vocabulary and 1,024 positions
HUB_MODELS = {
    "gpt2": ("openai-community/gpt2", 12, 12, 768),
    "gpt2-medium": ("openai-community/gpt2-medium", 24, 16, 1024),
    "gpt2-large": ("openai-community/gpt2-large", 36, 20, 1280),
    "gpt2-xl": ("openai-community/gpt2-xl", 48, 25, 1600),
    "distilgpt2": ("distilbert/distilgpt2", 6, 12, 768),
}
HUB_FILES = [CONFIG, "model.safetensors"]  # each of them has its weights as safetensors
LOCAL_FOLDER_HELP = "or pass a local folder holding config.json and model.safetensors (or pytorch_model.bin)"


@dataclass(frozen=True)
class Source:
    """What a model is and where: its `kind` (`elsewhere`: trained by nanoGPT or for Hugging Face, not gptwatch),
    its `path` (None for a hub model not fetched yet), the `hub` name, and the `contents` of a checkpoint file."""

    kind: str
    path: Path | None = None
    hub: str | None = None
    contents: object = None

    @property
    def elsewhere(self) -> bool:
        return self.kind in (NANOGPT, HUGGINGFACE, HUB)


def identify(source: str | Path, *, model: bool = True) -> Source:
    """What `source` names: given as a model (`model`, as --init_from gives one), maybe a hub model; given as a path
    (as --out_dir gives one), anything that is no model file of another kind is taken for a gptwatch checkpoint,
    whose reader says what is wrong with it. Reads at most a checkpoint file (memory-mapped), never downloads."""
    path = Path(source)
    name = hub_name(str(source)) if model else None
    if model and not path.exists():
        if name is not None:
            return Source(HUB, hub=name)
        raise CheckpointError(
            f"{source} is neither a file or folder here nor a model gptwatch fetches from the "
            f"Hugging Face hub ({', '.join(HUB_MODELS)}); give a gptwatch or nanoGPT ckpt.pt "
            f"(or the folder holding it), {LOCAL_FOLDER_HELP}"
        )
    if name is not None:
        warn(
            f"reading the local {'folder' if path.is_dir() else 'file'} {path}, not the hub model {name} of the "
            f"same name; to fetch that one, give its repository, {HUB_MODELS[name][0]}"
        )
    given = path
    if path.is_dir():
        if (path / CONFIG).exists() or (path / CONFIG).is_symlink():  # what it is: its reader checks
            return Source(HUGGINGFACE, path)
        if model and not (path / CHECKPOINT).exists():
            raise CheckpointError(
                f"{path} holds neither {CONFIG} (a Hugging Face model's folder) nor {CHECKPOINT} "
                f"(a gptwatch or nanoGPT checkpoint); give one of those, or the file itself"
            )
        path = path / CHECKPOINT
    # a gptwatch checkpoint keeps the path as given: its reader names what is wrong there (a folder as ckpt.pt)
    if not path.is_file() or not is_torch_archive(path):
        return Source(GPTWATCH, given)
    contents = read_torch(path)
    if isinstance(contents, dict) and "model_args" in contents and "model" in contents and "format" not in contents:
        return Source(NANOGPT, path, contents=contents)  # the shape of nanoGPT's train.py checkpoint
    return Source(GPTWATCH, given, contents=contents)


def load_model(
    source: str | Path | Source, device: torch.device, *, block_size: int | None = None, dropout: float | None = None
) -> Loaded:
    """The model `source` gives (a `Source`, or a path here), on `device` in eval mode, with its tokenizer; with
    `block_size`, cropped to that many positions."""
    found = source if isinstance(source, Source) else identify(source, model=False)
    if found.kind == GPTWATCH:
        loaded = load_gptwatch(found.path, device, found.contents, dropout=dropout)
    else:  # trained elsewhere: described as a checkpoint would be, what was read under "imported"
        if found.kind == NANOGPT:
            config, tokenizer, weights, source = read_nanogpt(found.path, found.contents)
            what = f"the model in {found.path}"
        else:
            folder = found.path if found.path is not None else fetch(found.hub, device)
            config, tokenizer, weights, source = read_folder(folder, found.hub)
            what = found.hub or f"the model in {folder}"
        if tokenizer.vocab_size > config.vocab_size:
            raise CheckpointError(
                f"{what} has {config.vocab_size:,} token rows, fewer than the "
                f"{tokenizer.vocab_size:,} tokens of its vocabulary ({tokenizer.name}); use the "
                f"model and vocabulary that were saved together"
            )
        if tokenizer.vocab_size < config.vocab_size:  # the rows beyond the vocabulary pad it, never to be sampled
            config = dataclasses.replace(config, vocab_used=tokenizer.vocab_size)
        if dropout is not None:
            config = dataclasses.replace(config, dropout=dropout)
        check_fits(config, what, device)
        state = weights(config)
        with torch.device("meta"):  # its parameters never initialised at random (a second or more for GPT-2's sizes)
            model = GPT(config)
        model.to_empty(device=torch.device("cpu"))  # allocated, not initialised
        model.lm_head.weight = model.wte.weight  # to_empty gave each its own tensor: tie them again, as GPT does
        model.load_state_dict(state, strict=True)
        model.to(device).eval()
        loaded = Loaded(
            model,
            tokenizer,
            {"model_config": model.config.to_dict(), "tokenizer": tokenizer.to_meta(), "imported": source},
        )
    if block_size is not None and block_size != loaded.model.config.block_size:
        positions = loaded.model.config.block_size
        if block_size > positions:
            raise UsageError(
                f"block_size={block_size} is above the {positions} positions of {found.hub or found.path}"
                f"; use --block_size={positions} or less"
            )
        loaded.model.crop_block_size(block_size)
        loaded.checkpoint["model_config"] = loaded.model.config.to_dict()
    return loaded


def model_name(source: str) -> str:
    """What a model given by path or name is called: a hub name as it is, else the name of its folder."""
    path = Path(source)
    if hub_name(source) is not None and not path.exists():
        return hub_name(source)
    path = path.resolve()
    return path.parent.name if path.is_file() else path.name


def describe(loaded: Loaded) -> str:
    """One line saying what a model trained elsewhere is, e.g. "nanoGPT checkpoint out/ckpt.pt (iteration 5000):
    6 layers x 6 heads, 384 wide, 256 positions, char vocabulary of 65 tokens"."""
    cfg, source, tokenizer = loaded.model.config, loaded.checkpoint["imported"], loaded.tokenizer
    if source["format"] == NANOGPT:
        iteration = source.get("iter_num")
        what = f"nanoGPT checkpoint {source['path']}" + (f" (iteration {iteration})" if iteration is not None else "")
    else:
        where = f"{source['hub']} ({source['path']})" if source.get("hub") else source["path"]
        what = f"Hugging Face {source['class']} {where}"
    return (
        f"{what}: {cfg.n_layer} layers x {cfg.n_head} heads, {cfg.n_embd} wide, {cfg.block_size} positions, "
        f"{tokenizer.name} vocabulary of {tokenizer.vocab_size:,} tokens"
    )


# --- models on the Hugging Face hub, by name -----------------------------------------------------------


def hub_name(source: str) -> str | None:
    """The hub model `source` names ("gpt2", or its repository "openai-community/gpt2"); None for any other."""
    for name, (repository, *_) in HUB_MODELS.items():
        if source in (name, repository):
            return name
    return None


def hub_config(name: str) -> GPTConfig:
    """The config of a hub model, known without fetching it."""
    _, n_layer, n_head, n_embd = HUB_MODELS[name]  # the rest is GPT2Config's default
    return gpt_config({"model_type": "gpt2", "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd}, Path(name))


def fetch(name: str, device: torch.device) -> Path:
    """The Hugging Face cache's folder of hub model `name`, downloaded first if need be, once it is known to fit."""
    check_fits(hub_config(name), name, device)
    hub = library("huggingface_hub", f"fetching {name} from the Hugging Face hub")
    repository = HUB_MODELS[name][0]
    try:
        return Path(hub.snapshot_download(repository, allow_patterns=HUB_FILES))
    except Exception as exc:  # offline, unreachable, renamed or refused: the hub's errors come as many types
        # an HTTP answer is a refusal (its errors are OSErrors too); any other failure to connect means offline
        answered = any(kind.__name__ == "HTTPError" for kind in type(exc).__mro__)
        offline = not answered and isinstance(exc, (OSError, ConnectionError, TimeoutError))
        why = (
            "this machine is offline, or cannot reach the hub, and the model is not in the Hugging Face cache yet"
            if offline
            else f"the hub refused to serve it ({type(exc).__name__})"
        )
        raise CheckpointError(
            f"cannot fetch {name} ({repository}) from the Hugging Face hub: {why}; connect to the "
            f"internet once (it is then kept in the Hugging Face cache), {LOCAL_FOLDER_HELP}"
        ) from None


def check_fits(config: GPTConfig, what: str, device: torch.device) -> None:
    """`check_memory` for a model from elsewhere: its float32 weights alone, before anything is downloaded."""
    n = parameter_count(config)  # float32, as gptwatch runs a model from elsewhere
    check_memory(
        {"weights": n * 4},
        device,
        lambda where, _, free: (
            f"{what} has {n:,} parameters, which need at least {size_text(n * 4)} of memory (float32), and "
            f"{size_text(free)} is free on {where.type}; use a smaller model, or a machine with more memory"
        ),
    )
