"""Train a GPT and watch its attention.

    python train.py [CONFIG.toml] [--key=value ...]
    torchrun --nproc_per_node=N train.py [CONFIG.toml] [--key=value ...]

With no CONFIG, configs/pronouns.toml runs: the pronoun demo; with --dataset naming
a text of your own, settings chosen for that text (`trainer/start.py`); with --init_from naming a
model to fine-tune, the built-in defaults.
`--help` lists every key and says which base applies when. Progress goes to the terminal and to TensorBoard under
log_dir/run_name; the checkpoint to out_dir/ckpt.pt.

This file is the command line around `trainer.Trainer`, which holds the training
step and its loop; what a run shows plugs in as callbacks.
"""

from __future__ import annotations

import cli

if __name__ == "__main__":   # before the imports below, so a Ctrl-C while torch loads is one line
    cli.report_interrupts_while_starting()

# isort: split
import shlex
import signal
import sys
from contextlib import nullcontext
from pathlib import Path

from cli import UsageError, run_cli
from config import TrainConfig, make_config, parse_command_line
from files import utf8_name
from trainer import runtime
from trainer.resources import out_of_memory
from trainer.runlock import RunLock
from trainer.start import Settings, run_settings
from trainer.trainer import FitResult, Trainer

TENSORBOARD = "tensorboard --logdir {} --samples_per_plugin=images=200,text=200"
BASES = ("With no CONFIG.toml: configs/pronouns.toml (the demo), unless --dataset names real text (a file, or "
         "shakespeare, tinystories, tinystories_lower): then settings chosen for that text, scaled to its size and to "
         "a few minutes on a laptop CPU, and printed in one line at the start (resumed: the model's shape and "
         "tokenizer from the checkpoint). With a CONFIG.toml, that file alone.")


def main(argv: list[str]) -> int:
    config_path, overrides = parse_command_line(argv, BASES)  # --help prints and exits here
    problem = utf8_name(config_path) if config_path else None
    if problem is not None:  # its name becomes the run's name, which checkpoints and logs record
        raise UsageError(f"the config file name {problem}; rename it to a UTF-8 name")
    start = run_settings(config_path, overrides)
    cfg = make_config(start.config_path, overrides, start.settings, chosen=config_path is not None)
    # Until training takes the signals over, SIGTERM and SIGHUP unwind like Ctrl-C (errors.run_cli), so data
    # preparation cleans up its half-written files.
    rt = runtime.setup(cfg)
    try:
        if rt.is_main and start.line(cfg):
            print(start.line(cfg))
        # One run per out_dir: the processes of one torchrun job share it, and rank 0 speaks for them.
        with RunLock(cfg.out_dir) if rt.is_main else nullcontext() as lock:
            return train(cfg, start, rt, argv, lock)
    finally:
        runtime.teardown(rt)


def train(cfg: TrainConfig, start: Settings, rt: runtime.Runtime, argv: list[str],
          lock: RunLock | None = None) -> int:
    """Trains as `cfg` asks, from `start`'s settings; `lock` holds out_dir (rank 0), checked before every save."""
    with out_of_memory(cfg):
        trainer = Trainer.from_config(cfg, rt, config_name=start.name, checkpoint=start.checkpoint)
        if trainer.checkpoints is not None and lock is not None:
            trainer.checkpoints.guard = lock.check
        if trainer.finished:
            print(f"checkpoint is already at step {trainer.state.step} >= max_iters={cfg.max_iters}; "
                  f"raise --max_iters to train further")
            return 0
        # One run per TensorBoard run folder too (unless it is out_dir itself, locked already). A lock there left
        # by a killed run is taken over quietly: the out_dir lock it left says so already.
        folder = Path(cfg.log_dir) / trainer.state.run_name
        same = lock is not None and folder.resolve() == Path(cfg.out_dir).resolve()
        with RunLock(folder, key="log_dir", what="the TensorBoard run", option="--run_name", say_takeover=False) \
                if rt.is_main and not same else nullcontext():
            return _train(cfg, trainer, rt, argv)


def _train(cfg: TrainConfig, trainer: Trainer, rt: runtime.Runtime, argv: list[str]) -> int:
    writer = open_tensorboard(cfg, trainer.state.run_name) if rt.is_main else None
    try:
        if writer is not None:
            trainer.callbacks = main_process_callbacks(cfg, trainer, writer)
        result = trainer.fit()
        if writer is not None:   # the trainer's settings: a fine-tune's model keys are its model's
            hparams = {k: v for k, v in trainer.cfg.to_dict().items() if isinstance(v, (int, float, str, bool))}
            metrics = {"hparam/best_val_loss": result.best_val_loss, "hparam/wall_seconds": result.seconds,
                       **result.metrics}
            if result.evaluations:
                metrics["hparam/final_train_loss"] = result.evaluations[-1].train_loss
            writer.add_hparams(hparams, metrics)
    finally:
        if writer is not None:
            writer.close()  # keeps the TensorBoard events logged so far, also after an error
    if rt.is_main:
        report_end(cfg, result, argv, sample_prompt(cfg, trainer))
    return 0 if result.completed else 128 + result.stopped_by


def open_tensorboard(cfg: TrainConfig, run_name: str):
    from watch.tensorboard import TensorBoardWriter

    print("TensorBoard: " + TENSORBOARD.format(shlex.quote(cfg.log_dir)))
    return TensorBoardWriter(Path(cfg.log_dir) / run_name)   # its folder is checked writable by its lock


def main_process_callbacks(cfg: TrainConfig, trainer: Trainer, writer) -> list:
    """The terminal and TensorBoard scalars, a text sample, and attention watching: head types, and
    with probe files (the corpus's own, or --probes/--agreement) pronoun resolution and agreement."""
    from data.corpora import corpus_of
    from trainer.callbacks import TextSample, TrainingLog
    from watch.callback import AttentionWatch

    corpus = corpus_of(cfg.dataset)
    probes = cfg.probes or trainer.data.probes_path or (corpus and corpus.probes_path) or None
    agreement = cfg.agreement or (corpus and corpus.agreement_path) or None
    return [TrainingLog(writer),
            TextSample(writer, trainer.tokenizer, cfg.sample_prompt, cfg.sample_tokens, cfg.seed),
            AttentionWatch(writer, cfg.watch_sentences, probes, agreement, page=Path(cfg.out_dir) / "attention.html",
                           ablation=cfg.ablation)]


def report_end(cfg: TrainConfig, result: FitResult, argv: list[str], prompt: str | None = None) -> None:
    """The run's last lines: how to resume a stopped run, TensorBoard, the files written, and a sample command
    (with `prompt`, words this model knows). Every command here runs as printed (tests/test_hints.py)."""
    if not result.completed:
        name = signal.Signals(result.stopped_by).name
        given = [a for a in argv if a.split("=")[0] != "--resume"]
        print(f"\n{name}: saved step {result.step} to {Path(cfg.out_dir) / 'ckpt.pt'}; resume with: "
              f"{shlex.join(['python', 'train.py', *given, '--resume'])}")
    print("open TensorBoard: " + TENSORBOARD.format(shlex.quote(cfg.log_dir)))
    for what, path in result.files.items():
        print(f"{what}: {path} (open it in a browser; it needs no network)")
    command = ["python", "sample.py", f"--out_dir={cfg.out_dir}", *(["--prompt", prompt] if prompt else [])]
    print(f"sample: {shlex.join(command)}")


def sample_prompt(cfg: TrainConfig, trainer: Trainer) -> str | None:
    """A prompt this model can read, for the sample command: the start of the first watched sentence (or of a
    sentence of the held-out text) up to its last pronoun, else its first half; None when there is none."""
    from data.tokenizer import TokenizerError
    from watch.probesets import PRONOUN_WORD, held_out_sentences

    texts = list(cfg.watch_sentences)
    if not texts and trainer.data is not None:   # the sentences the watch chose (the same choice)
        texts = held_out_sentences(trainer.data.tokens("val"), trainer.tokenizer, trainer.model.config.block_size)
    for text in texts:
        pronouns = [m for m in PRONOUN_WORD.finditer(text) if len(text[:m.start()].split()) >= 2]
        words = text.split()
        prompt = text[:pronouns[-1].end()] if pronouns else " ".join(words[:max(1, len(words) // 2)])
        try:
            if trainer.tokenizer.encode(prompt):
                return prompt
        except TokenizerError:
            continue
    return None


if __name__ == "__main__":
    # A closed pipe or terminal (`python train.py | head -1`, an ssh drop) must not stop a run that can go on.
    sys.exit(run_cli(main, sys.argv[1:], survive_closed_output=True))
