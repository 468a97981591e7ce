"""Where a run starts, decided once, as one value: `resolve` turns a command line into a `Start`, the run's settings
and the model it starts from, scratch, resumed or fine-tuned; the trainer builds the run from that.

The settings, before the command line's keys, which win over any of them: a config file given, that file alone;
else, for `--dataset` naming real text, settings chosen for it (`settings_for_text`), printed in one line at the
start (resumed, the model's shape and tokenizer are the checkpoint's, read once, here); else, for a model to
fine-tune, the built-in defaults; else `configs/pronouns.toml`, the demo.

The model (`init_from`, as formats/sources.py identifies it): a new one, the checkpoint a --resume run continues,
or a model trained elsewhere that decides the run's model: its sizes and architecture (`MODEL_KEYS`), its
settings from elsewhere and its tokenizer. A model key or tokenizer the user set must agree with it, or the run
is refused naming both. A resumed fine-tune takes all of this from its checkpoint, never reading the model again;
a resumed run continues its checkpoint only with the settings, data and model it was trained with (`Start.resume`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from common.cli import say
from common.errors import UsageError, UserError, warn
from common.files import check_utf8, inside_name
from common.settings import RESUME, SCRATCH, TrainConfig, checked_paths, make_config, parse_command_line, read_toml
from data import corpora
from data.prepare import ModelVocabulary, Prepared, prepare, source_text
from data.tokenizer import FULL_GPT2, Tokenizer, tokenizer_from_meta
from formats.checkpoint import CHECKPOINT, checkpoint_path, load_checkpoint, load_weights, saved_settings, validate
from formats.format import CheckpointError
from formats.huggingface import hub_name
from formats.sources import describe, identify, load_model, model_name
from model.config import CONFIG_KEYS, IMPORTED_FIELDS, MODEL_KEYS, GPTConfig
from model.gpt import GPT
from trainer.runtime import check_corpus_fits

DEMO_CONFIG = corpora.REPO / "configs" / "pronouns.toml"
SAME_KIND = {"char": ("char",), "gpt2": ("gpt2", FULL_GPT2)}  # a tokenizer key -> the vocabularies it agrees with

# The shape of the model chosen for real text, its size decided by how much text there is. The classic block
# keeps each head readable; 2 layers let one head feed another (an induction head needs a head in an earlier
# layer), 4 heads a layer keep the head table short.
SMALL_TEXT = 50_000  # tokens: below this, a smaller model that memorises less
BLOCK = 64  # tokens of context: a sentence or two of characters, a paragraph of BPE tokens
BATCH = 16
STEPS = 2000  # at most: about 3 minutes on a 2-core laptop CPU at the size below
MIN_STEPS = 200
EPOCHS = 10  # at most this many passes over the training text, so a short text is not memorised
CHARS_PER_TOKEN = {"char": 1.0, "gpt2": 4.0}  # GPT-2's BPE: about 4 characters of English a token
SIZES = {
    "small": {"n_layer": 2, "n_head": 4, "n_embd": 64, "dropout": 0.1},
    "default": {"n_layer": 2, "n_head": 4, "n_embd": 128, "dropout": 0.0},
}


# --- the settings -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Where a run starts, resolved once by `resolve` from its command line: `cfg`, the run's settings (a fine-tune's
    model keys are its model's, and `init_from` is the model it fine-tunes: resumed, the one its checkpoint
    records); `name`, what its TensorBoard run is named after; for settings chosen for a text, the `text` (its file
    name and length) and, resumed, the checkpoint its model's shape comes from (`shape_from`); the `checkpoint` a
    resumed run continues; a new fine-tune's `model`, read, with its `description` in one line; and the tokenizer
    the data is prepared with (`vocabulary`; None: built from the text) and, once `prepared`, the `data`."""

    cfg: TrainConfig
    name: str = "default"
    text: tuple[str, int] | None = None
    shape_from: str | None = None
    checkpoint: dict | None = None
    model: GPT | None = None
    description: str | None = None
    vocabulary: ModelVocabulary | None = None
    data: Prepared | None = None  # the text it trains and validates on, once `prepared`

    def prepared(self, *, quiet: bool = False) -> Start:
        """This start with its data prepared (`data/prepare.py`: cached by content), with the model's vocabulary
        when the model brings one; `quiet`: without the lines a run prints (every process but the first)."""
        cfg = self.cfg
        check_corpus_fits(cfg)
        if self.description is not None and not quiet:
            say(f"fine-tuning {self.description}")
        vocabulary = self.vocabulary or cfg.tokenizer
        data = prepare(cfg.dataset, vocabulary, cfg.data_dir, cfg.val_fraction, cfg.corpus_sentences, quiet=quiet)
        return dataclasses.replace(self, data=data)

    def line(self) -> str | None:
        """The line printed at the start when settings were chosen for a text: what the run will use (the
        command line's keys included) and how to change it."""
        if self.text is None:
            return None
        file_name, characters = self.text
        done = self.checkpoint.get("step") if self.checkpoint is not None else None
        steps = max(self.cfg.max_iters, done if isinstance(done, int) else 0)  # or the resumed checkpoint's, if further
        cfg, m = self.cfg, self.cfg.model
        model = (
            f"model shape from {self.shape_from}"
            if self.shape_from
            else f"{_count(m.n_layer, 'layer')} x {_count(m.n_head, 'head')} x {m.n_embd} dims"
        )
        return (
            f"settings chosen for {file_name} ({characters:,} characters): {cfg.tokenizer} tokenizer, {model}, "
            f"block {m.block_size}, {cfg.max_iters:,} steps of {cfg.batch_size * m.block_size:,} tokens, "
            f"checkpoint in {cfg.out_dir}; change any with --key=value (e.g. --max_iters={2 * steps}), "
            f"or give a config file to replace them all; every key: python train.py --help"
        )

    def model_config(self, vocab_size: int) -> GPTConfig:
        """The model the run trains, for data of `vocab_size` tokens (a model from elsewhere has its own)."""
        if self.model is not None:
            return self.model.config
        saved = self.checkpoint["model_config"] if self.checkpoint is not None else None
        if saved is not None and self.cfg.fine_tunes:
            return GPTConfig(**{**saved, "dropout": self.cfg.model.dropout})
        config = self.cfg.model_config(vocab_size)
        if saved is not None:  # a smaller --block_size trains on shorter windows of the same position table
            config.block_size = saved["block_size"]
        return config

    def resume(self, path: Path, model: GPT, optimizer: Any, batches: Any) -> None:
        """Continues the checkpoint (read from `path`) in this run: refuses what this run's settings, its data and
        its model cannot continue, then puts back the weights, the optimizer's state and the random generators."""
        cfg, checkpoint, data = self.cfg, self.checkpoint, self.data
        check_resume_compatible(cfg, checkpoint, data.tokenizer.to_meta(), model.config, data_identity(cfg, data), path)
        problem = inside_name(checkpoint["run_name"]) if not cfg.run_name else None
        if problem is not None:  # the resumed run would write its TensorBoard logs to log_dir/run_name
            raise CheckpointError(
                f"{path} holds the run name {checkpoint['run_name']!r}, which {problem}, so its "
                f"TensorBoard logs would go outside --log_dir; resume with --run_name=NAME"
            )
        load_weights(model, checkpoint["model"], path)
        try:
            optimizer.load_state(checkpoint["optimizer"])
            batches.generator.set_state(checkpoint["rng"]["batches"])
            torch.set_rng_state(checkpoint["rng"]["torch"])
        except (KeyError, IndexError, RuntimeError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(
                f"{path}: its optimizer or random-generator state does not fit this model "
                f"({' '.join(str(exc).split())[:200]}); resume from the ckpt.pt that train.py wrote, "
                f"or start a new --out_dir"
            ) from None


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def resolve(argv: list[str], bases: str | None = None) -> Start:
    """Where the run of the command line `argv` (`[CONFIG.toml] [--key=value ...]`; `bases` is --help's word on
    the settings it starts from) starts: its settings, then its model (see the module's docstring)."""
    config_path, overrides = parse_command_line(argv, bases)  # --help prints and exits here
    overrides |= checked_paths(overrides)  # before choosing settings reads the dataset or a checkpoint
    if config_path:  # its name becomes the run's name, which checkpoints and logs record
        check_utf8(config_path, "the config file name", "rename it to a UTF-8 name")
    path, base, found = _base_settings(config_path, overrides)
    return starting_from(make_config(path, overrides, base, chosen=config_path is not None), **found)


def starting_from(cfg: TrainConfig, **found: Any) -> Start:
    """The `Start` of a run with the settings `cfg`: a new model, the checkpoint in out_dir continued (--resume), or
    a model read to fine-tune (`init_from`); `found` is what choosing the settings found (`_base_settings`)."""
    if cfg.resume:
        return _resuming(cfg, found)
    if cfg.fine_tunes:
        return _importing(cfg, found)
    return Start(cfg, **found)


def _base_settings(config_path: str | None, overrides: dict[str, Any]) -> tuple[str | None, dict, dict]:
    """The settings the command line's keys are laid over (see the module's docstring): (the config file, the
    settings chosen for a text, what the `Start` says of them: its name, text, shape_from and checkpoint)."""
    if config_path is not None:
        return config_path, {}, {"name": Path(config_path).stem}
    dataset = overrides.get("dataset")
    init_from = overrides.get("init_from", SCRATCH)
    if init_from not in (SCRATCH, RESUME):  # a model to fine-tune: its shape, the built-in settings, its own folder
        name = f"{model_name(init_from)}-{corpora.text_name(dataset or TrainConfig.dataset)}"
        return None, {"out_dir": out_dir_for(name)}, {"name": name}
    if dataset is None or dataset in corpora.GENERATED or not str(dataset).strip():
        return (str(DEMO_CONFIG) if DEMO_CONFIG.is_file() else None), {}, {"name": DEMO_CONFIG.stem}
    text = source_text(dataset, 0)[0]  # read as preparing reads it: the same error, before anything is printed
    name = corpora.text_name(dataset)
    shape, tokenizer, source, checkpoint = None, overrides.get("tokenizer"), None, None
    if overrides.get("resume") or init_from == RESUME:
        path = Path(overrides.get("out_dir") or out_dir_for(name)) / CHECKPOINT
        with contextlib.suppress(UserError):  # resuming says why there is no readable one, later
            checkpoint = load_checkpoint(path)
        saved = checkpoint.get("train_config") if checkpoint is not None else None
        if isinstance(saved, dict):
            shape = {key: saved[key] for key in CONFIG_KEYS if key in saved}
            tokenizer = tokenizer or (saved["tokenizer"] if isinstance(saved.get("tokenizer"), str) else None)
            source = str(path)
    chosen = settings_for_text(
        len(text),
        name,
        tokenizer=tokenizer,
        shape=shape,
        val_fraction=overrides.get("val_fraction", TrainConfig.val_fraction),
        sample_prompt="\n" if "\n" in text or not text else text[0],
    )
    return (
        None,
        chosen,
        {"name": name, "text": (Path(dataset).name, len(text)), "shape_from": source, "checkpoint": checkpoint},
    )


def out_dir_for(name: str) -> str:
    """out/NAME for a run named NAME: one plain folder inside out/ ("text" where NAME could not be one: '..'),
    never a folder that one of configs/ writes to (a text called pronouns.txt must not replace the demo's
    checkpoint)."""
    name = name if name.strip(". ") and not {"/", "\\"} & set(name) else "text"
    taken = set()
    for config in (corpora.REPO / "configs").glob("*.toml"):
        try:
            taken.add(Path(read_toml(config).get("out_dir", "")).name)
        except UserError:
            continue
    return f"out/{name}" if name not in taken else f"out/{name}-text"


def settings_for_text(
    characters: int,
    name: str,
    *,
    tokenizer: str | None = None,
    shape: dict[str, Any] | None = None,
    val_fraction: float = 0.1,
    sample_prompt: str = "\n",
) -> dict[str, Any]:
    """The base settings for a text of `characters` characters called `name`: the tokenizer (char unless
    `tokenizer` fixes it), the model's shape (unless `shape` fixes it: a checkpoint resumed), the block, the
    steps and the intervals, and out/NAME. A text too short for the block gets a shorter block, down to 8 tokens
    (preparing a shorter text says why it cannot)."""
    tokenizer = tokenizer or "char"
    tokens = characters / CHARS_PER_TOKEN.get(tokenizer, 1.0)
    out: dict[str, Any] = {"tokenizer": tokenizer}
    if shape is None:
        block = BLOCK
        while block > 8 and tokens * val_fraction < block + 2:  # the val split must hold a window
            block //= 2
        out.update(arch="gpt2", bias=False, block_size=block, **SIZES["small" if tokens < SMALL_TEXT else "default"])
    else:
        out.update(shape)
        block = shape.get("block_size", BLOCK)
    per_step = BATCH * block
    steps = (
        STEPS
        if tokens * (1 - val_fraction) * EPOCHS >= STEPS * per_step
        else max(MIN_STEPS, _round(tokens * (1 - val_fraction) * EPOCHS / per_step, 50))
    )
    out.update(  # the other keys keep their built-in defaults
        batch_size=BATCH,
        max_iters=steps,
        learning_rate=3e-3,
        min_lr=3e-4,
        warmup_iters=min(100, steps // 10),
        eval_interval=max(50, _round(steps / 8, 50)),
        log_interval=25,
        watch_interval=max(10, _round(steps / 80, 5)),
        sample_prompt=sample_prompt,
        out_dir=out_dir_for(name),
    )
    return out


def _round(value: float, step: int) -> int:
    return max(step, int(math.floor(value / step + 0.5)) * step)


# --- the model ----------------------------------------------------------------------------------------------


def _importing(cfg: TrainConfig, found: dict) -> Start:
    """A new fine-tune: the model read (on the CPU; the trainer moves it to its device, and reading it leaves the
    random generators as they were), checked against the keys the user set, and the run's settings made its."""
    block_size = cfg.model.block_size if "block_size" in cfg.given else None
    source = identify(cfg.init_from)
    # the folder a model file is in, or the folder that is the model
    folder = source.path if source.path is None or source.path.is_dir() else source.path.parent
    if folder is not None and folder.resolve() == Path(cfg.out_dir).resolve():
        raise UsageError(
            f"--out_dir={cfg.out_dir} is the folder the model to fine-tune is read from "
            f"({source.path}), and this run's checkpoint would replace it there; choose another "
            f"--out_dir (without one, a fine-tune writes to out/MODEL-TEXT)"
        )
    with torch.random.fork_rng(devices=[]):
        loaded = load_model(source, torch.device("cpu"), block_size=block_size, dropout=cfg.model.dropout)
    config = loaded.model.config
    what = f"the model {cfg.init_from}"
    for key in MODEL_KEYS:
        given, theirs = getattr(cfg.model, key), getattr(config, key)
        if key in cfg.given and given != theirs:
            raise UsageError(
                f"config key '{key}' is {given!r} but {what} has {theirs!r}; leave {key} out to take "
                f"the model's, or fine-tune another model"
            )
    description = (
        describe(loaded)
        if source.elsewhere
        else f"gptwatch checkpoint {cfg.init_from} (step {loaded.checkpoint['step']})"
    )
    return _models_own(
        cfg, config, loaded.tokenizer, what, cfg.init_from, **found, model=loaded.model, description=description
    )


def _resuming(cfg: TrainConfig, found: dict) -> Start:
    """A resumed run: its checkpoint wins, checked to be complete here (whether this run's settings and data can
    continue it: `Start.resume`). `init_from`, when given, must name what it started from."""
    path, checkpoint = Path(cfg.out_dir) / CHECKPOINT, found.pop("checkpoint", None)
    if checkpoint is None:
        source = identify(cfg.out_dir, model=False)
        if source.elsewhere:
            raise UserError(
                f"{cfg.out_dir} holds a {source.format.title} model, and --resume (or --init_from=resume) continues "
                f"only a run gptwatch's train.py saved; to train it further, fine-tune it: python train.py "
                f"--init_from={shlex.quote(str(cfg.out_dir))} (without --resume; its checkpoint goes to a new "
                f"out_dir)"
            )
        if not path.exists():
            asked, drop = (
                (f"init_from is {RESUME!r}", f"set init_from to {SCRATCH}")
                if cfg.init_from == RESUME
                else ("--resume", "drop --resume")
            )
            raise UserError(
                f"{asked} but there is no checkpoint at {path}; {drop} to start a new run, or set --out_dir to "
                f"the folder that holds ckpt.pt"
            )
        checkpoint = load_checkpoint(path, source.contents)
    model = validate(checkpoint, path, for_resume=True)  # a switch it does not record is off
    saved = saved_settings(checkpoint, path)  # checked as a config is: resuming needs its train_config
    started = saved.init_from if saved.fine_tunes else SCRATCH
    if "init_from" in cfg.given and cfg.init_from != RESUME and not same_source(cfg.init_from, started):
        raise UsageError(
            f"config key 'init_from' is {cfg.init_from!r} but the checkpoint {path} started from "
            f"{started!r}; resume with --init_from={started} (or without init_from), or start a new "
            f"--out_dir"
        )
    # The seed drew the starting model, which the untrained baselines are drawn again from: the checkpoint's, unless
    # the user gives another (a difference `check_resume_compatible` refuses).
    cfg = cfg.replaced(init_from=started, **({} if "seed" in cfg.given else {"seed": saved.seed}))
    if not cfg.fine_tunes:
        return Start(cfg, **found, checkpoint=checkpoint)
    tokenizer = tokenizer_from_meta(checkpoint["tokenizer"])
    return _models_own(cfg, model, tokenizer, f"the checkpoint {path}", started, **found, checkpoint=checkpoint)


def _models_own(
    cfg: TrainConfig, config: GPTConfig, tokenizer: Tokenizer, what: str, init_from: str, **start: Any
) -> Start:
    """The run's settings made those of the model it fine-tunes (`config`, `tokenizer`, read from `what`) but the
    model keys the user set. A tokenizer the user set must be of its kind: char for a char vocabulary, gpt2 for
    GPT-2's BPE (the model's vocabulary is kept as it is, never compacted to the text)."""
    cfg = cfg.replaced(**{key: getattr(config, key) for key in (*MODEL_KEYS, "block_size") if key not in cfg.given})
    if "tokenizer" in cfg.given and tokenizer.name not in SAME_KIND[cfg.tokenizer]:
        raise UsageError(
            f"config key 'tokenizer' is {cfg.tokenizer!r} but {what} reads text with its own "
            f"{tokenizer.name} vocabulary of {tokenizer.vocab_size:,} tokens; leave tokenizer out to "
            f"take the model's, or fine-tune another model"
        )
    return Start(cfg, **start, vocabulary=ModelVocabulary(tokenizer, init_from))


def same_source(a: str, b: str) -> bool:
    """Whether two init_from values name the same model: the same words, the same hub model (`gpt2` is
    `openai-community/gpt2`), or paths to the same folder or checkpoint (a folder holding ckpt.pt is that file)."""
    if a == b:
        return True
    if hub_name(a) is not None and not Path(a).exists():
        return hub_name(a) == hub_name(b) and not Path(b).exists()
    return (
        Path(a).exists()
        and Path(b).exists()
        and checkpoint_path(Path(a).resolve()) == checkpoint_path(Path(b).resolve())
    )


def data_identity(cfg: TrainConfig, data: Prepared) -> dict:
    """What defines the data a run trains and validates on: the source text's sha256, how it was split and
    tokenized, and where its prepared files are. A checkpoint records it; a resumed run must match it."""
    meta = data.meta
    return {
        "dataset": cfg.dataset,
        "source": meta.get("source"),
        "source_sha256": meta.get("source_sha256"),
        # the tokenizer's name in the prepared folder's: a fine-tuned model's vocabulary has its own
        "tokenizer": meta.get("vocabulary", cfg.tokenizer),
        "val_fraction": cfg.val_fraction,
        "data_dir": cfg.data_dir,
        "folder": str(data.folder),
    }


def _vocabulary(meta: dict) -> str:
    """A tokenizer's record in words: its name and size."""
    size = len(meta.get("chars") or "") if meta.get("name") == "char" else len(meta.get("kept_ids") or []) or 50257
    return f"{meta.get('name')} of {size:,} tokens"


def _flag(key: str, value: Any) -> str:
    return f"--{key}={str(value).lower() if isinstance(value, bool) else value}"


def _differs(
    found: list[tuple[str, str]], what: str, ours: Any, saved: Any, fix: str | None = None, why: str = "", shown=repr
) -> None:
    """Adds to `found` a setting that differs from the checkpoint's (`saved`), in words (`shown`, and `why` it matters
    after the checkpoint's value), and the setting that resumes it (`fix`, else `saved` as a flag); nothing when
    they agree."""
    if ours != saved:
        found.append((f"{what} is {shown(ours)} (the checkpoint's: {shown(saved)}{why})", fix or _flag(what, saved)))


def data_differences(checkpoint: dict, data: dict, path: Path) -> list[tuple[str, str]]:
    """Where this run would train and validate on other data than the checkpoint's: another split (val_fraction)
    or another text (its sha256), so the model would validate on text it trained on and its best loss would not
    compare; as (what differs, the setting that resumes it). Where the data lives (the file's path, data_dir) may
    change. A checkpoint from before the text was recorded is checked for its split only, with one warning."""
    saved = checkpoint.get("data") if isinstance(checkpoint.get("data"), dict) else None
    fraction = (saved or checkpoint["train_config"]).get("val_fraction")
    found = []
    why = "; another split would validate on text the model trained on"
    if isinstance(fraction, float):
        _differs(found, "val_fraction", data["val_fraction"], fraction, why=why, shown="{:g}".format)  # exact flag
    if saved is None or not isinstance(saved.get("source_sha256"), str):
        warn(
            f"{path} does not record which text it was trained on (an older checkpoint), so resuming cannot check "
            f"that {data['source']} is that text; going on as if it were"
        )
        return found
    if saved["source_sha256"] != data["source_sha256"]:
        what = (
            f"--dataset={data['dataset']} is not the text the checkpoint was trained on ({saved.get('source')}, "
            f"sha256 {saved['source_sha256'][:12]}; this one's is {data['source_sha256'][:12]})"
        )
        found.append((what, f"--dataset={saved.get('source')}"))
    return found


def check_resume_compatible(
    cfg: TrainConfig,
    checkpoint: dict,
    tokenizer_meta: dict,
    model_config: GPTConfig,
    data: dict | None = None,
    path: Path | None = None,
) -> None:
    """One UsageError naming every setting that differs from the checkpoint's in a way resuming cannot absorb, each
    with the checkpoint's value, and the settings that resume it: this run's, that of the model it builds
    (`model_config`) which a model trained elsewhere brought, its vocabulary and, given `data` (`data_identity`),
    its data (`data_differences`)."""
    recorded, theirs = checkpoint["train_config"], GPTConfig(**checkpoint["model_config"])
    # The model: the block, this run's model settings, and what a model trained elsewhere brought (a switch an older
    # checkpoint does not record is off).
    found: list[tuple[str, str]] = []
    if cfg.model.block_size > theirs.block_size:  # a smaller one just trains on shorter windows
        why = "; a resumed run may only lower it"
        _differs(found, "block_size", cfg.model.block_size, theirs.block_size, why=why, shown=str)
    for key in MODEL_KEYS:  # the vocabulary is checked through the tokenizer
        _differs(found, key, getattr(cfg.model, key), getattr(theirs, key))
    started, why = _flag("init_from", recorded.get("init_from", SCRATCH)), ": it started from another model"
    for key in IMPORTED_FIELDS:  # query/key/value biases, GPT-2's GELU, padding rows: what init_from brought
        _differs(found, f"the model's {key}", getattr(model_config, key), getattr(theirs, key), started, why)
    why = "; it drew the starting model, which the untrained baselines are drawn again from"
    _differs(found, "seed", cfg.seed, recorded.get("seed", cfg.seed), why=why, shown=str)
    # the optimizer states would not fit
    _differs(found, "optimizer", cfg.optimizer, recorded.get("optimizer", "adamw"))
    if checkpoint["tokenizer"] != tokenizer_meta:
        given = f"--dataset={recorded.get('dataset')} --tokenizer={recorded.get('tokenizer')}"
        what = (
            f"the vocabulary of this data, {_vocabulary(tokenizer_meta)}, is not the checkpoint's, "
            f"{_vocabulary(checkpoint['tokenizer'])} (of {given})"
        )
        found.append((what, given))
    if data is not None:
        found += data_differences(checkpoint, data, path or Path(cfg.out_dir) / CHECKPOINT)
    if found:
        differ = f"{len(found)} settings differ" if len(found) > 1 else "1 setting differs"
        fixes = " ".join(dict.fromkeys(fix for _, fix in found))
        raise UsageError(
            f"cannot resume {path or 'the checkpoint'}: {differ} from the run it holds: "
            f"{'; '.join(what for what, _ in found)}; resume with {fixes}, or start a new --out_dir"
        )
