"""A fine-tuning step of GPT-2 small's shapes on this CPU: ours beside nanoGPT's own, with the same weights.

    python bench/finetune.py --repeats 3 --steps 5 [--warmup 2]

The model has GPT-2 small's shapes: 12 layers of 12 heads, 768 wide, GPT-2's vocabulary of 50,257 tokens and
1,024 positions, with biases. nanoGPT's own `model.py` builds it (its initialisation, random weights) and it is
saved as nanoGPT's `train.py` saves a checkpoint (`bench/out/.nanogpt-finetune/out-finetune/ckpt.pt`). Then,
on batches of 4 windows of 256 tokens (the position table cropped to 256, as both do) drawn uniformly from
GPT-2's vocabulary, in float32, with AdamW (weight decay 0.1 on matrices, betas 0.9/0.95) and the gradient
clipped at 1.0:

- nanoGPT: its own `train.py`, resuming from that checkpoint (`--init_from=resume`) in a copy of nanoGPT
  (`../shared/anchors/nanogpt`), on random tokens written in its data layout (train.bin/val.bin); each step is
  the loop iteration its train.py times and prints (`iter N: ... time T ms`): forward, backward, clipping,
  AdamW step, the next batch;
- ours: the same checkpoint read by `load_model` (`checkpoints/`), trained by `Trainer.step()`, the step train.py
  runs, with the optimizer train.py builds (`bench.workers.finetune`).

Before timing, the two models' logits are compared on one batch (they must agree within 1e-5). Each side runs in
a child process of its own, interleaved over the repeats (nanoGPT, ours; ours, nanoGPT; ...). Per repeat: the
median ms per step over `--steps` steps after `--warmup` (plus the first, which nanoGPT spends on an evaluation
too), the ratio ours / nanoGPT, and each process's peak resident memory. Results: bench/out/finetune.json and
bench/out/FINETUNE.md (ignored by git); the figures quoted in docs/pretrained.md come from there.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a script: the repository root holds the packages it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import SCRATCH, interleaved, log, machine_info, run_child, run_worker, spread  # noqa: E402
from bench.nanogpt import ANCHOR, load_model_module, parse_training  # noqa: E402
from bench.report import figure, table  # noqa: E402

HOME = SCRATCH / ".nanogpt-finetune"  # hidden: a copy of another project's code, not ours to lint or scan
OUT = "out-finetune"  # nanoGPT's out_dir, inside its home
DATASET = "random_gpt2"  # <home>/data/random_gpt2/{train,val}.bin
GPT2_SMALL = {
    "n_layer": 12,
    "n_head": 12,
    "n_embd": 768,
    "block_size": 1024,
    "bias": True,
    "vocab_size": 50257,
    "dropout": 0.0,
}
LEARNING_RATE, WEIGHT_DECAY, BETAS = 6e-4, 0.1, (0.9, 0.95)
DATA_TOKENS = 200_000
SAME_FUNCTION_TOL = 1e-5
RESULTS_JSON = SCRATCH / "finetune.json"
RESULTS_MD = SCRATCH / "FINETUNE.md"


def available() -> str | None:
    """None when nanoGPT's files are here, else why not."""
    missing = [name for name in ("model.py", "train.py", "configurator.py") if not (ANCHOR / name).is_file()]
    return f"nanoGPT's {', '.join(missing)} not at {ANCHOR}" if missing else None


@dataclass(frozen=True)
class Setup:
    """What is measured: a model of nanoGPT's `model_args` (GPT-2 small's), trained at `block` positions on
    batches of `batch`, from a copy of nanoGPT in `home`. The tests run it with a tiny model."""

    model_args: dict = field(default_factory=lambda: dict(GPT2_SMALL))
    block: int = 256
    batch: int = 4
    home: Path = HOME

    @property
    def checkpoint(self) -> Path:
        return self.home / OUT / "ckpt.pt"

    def prepare(self) -> Path:
        """A fresh copy of nanoGPT holding random tokens of the vocabulary in its data layout, and the checkpoint
        both sides start from (returned): the model built by nanoGPT's model.py, saved as its train.py saves."""
        import numpy as np
        import torch

        if self.home.exists():
            shutil.rmtree(self.home)
        shutil.copytree(ANCHOR, self.home, ignore=shutil.ignore_patterns("__pycache__", "data"))
        for path in self.home.rglob("*"):  # the anchor is read-only; the copy must be writable
            path.chmod(0o755 if path.is_dir() else 0o644)
        data = self.home / "data" / DATASET
        data.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for split in ("train", "val"):
            rng.integers(self.model_args["vocab_size"], size=DATA_TOKENS, dtype=np.uint16).tofile(data / f"{split}.bin")
        model = self._nanogpt_model()
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its optimizer groups
            optimizer = model.configure_optimizers(WEIGHT_DECAY, LEARNING_RATE, BETAS, "cpu")
        self.checkpoint.parent.mkdir(parents=True)
        torch.save(
            {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "model_args": self.model_args,
                "iter_num": 0,
                "best_val_loss": 1e9,
                "config": {"dataset": DATASET, "init_from": "scratch"},
            },
            self.checkpoint,
        )
        return self.checkpoint

    def _nanogpt_model(self):
        import torch

        nano = load_model_module(self.home)
        torch.manual_seed(0)
        with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
            return nano.GPT(nano.GPTConfig(**self.model_args))

    def same_function(self) -> float:
        """max |logit difference| between nanoGPT's model and ours, both read from the checkpoint, on one batch."""
        import torch

        from formats import load_model

        theirs = self._nanogpt_model()
        theirs.load_state_dict(torch.load(self.checkpoint, weights_only=True)["model"])
        theirs.crop_block_size(self.block)
        ours = load_model(self.checkpoint, torch.device("cpu"), block_size=self.block).model
        idx = torch.randint(self.model_args["vocab_size"], (1, self.block), generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            return float((ours(idx, all_logits=True)[0] - theirs.eval()(idx, idx)[0]).abs().max())

    def nanogpt_command(self, steps: int) -> list[str]:
        """nanoGPT's train.py resuming from the checkpoint for `steps` steps (its iterations 1..steps, after
        iteration 0, which evaluates once first), printing every step's time, saving nothing."""
        return [
            sys.executable,
            "train.py",
            "--init_from=resume",
            f"--out_dir={OUT}",
            f"--dataset={DATASET}",
            f"--batch_size={self.batch}",
            f"--block_size={self.block}",
            "--gradient_accumulation_steps=1",
            "--device=cpu",
            "--compile=False",
            "--dtype=float32",
            "--dropout=0.0",
            f"--learning_rate={LEARNING_RATE}",
            f"--weight_decay={WEIGHT_DECAY}",
            f"--beta1={BETAS[0]}",
            f"--beta2={BETAS[1]}",
            "--grad_clip=1.0",
            f"--max_iters={steps}",
            "--eval_interval=1000000",
            "--eval_iters=1",
            "--log_interval=1",
            "--always_save_checkpoint=False",
            "--wandb_log=False",
        ]

    def ours_overrides(self) -> list[str]:
        """train.py's keys for the same run: the model's shape, the batch, AdamW's settings, float32 on the CPU."""
        m = self.model_args
        return [
            f"--n_layer={m['n_layer']}",
            f"--n_head={m['n_head']}",
            f"--n_embd={m['n_embd']}",
            f"--block_size={self.block}",
            f"--batch_size={self.batch}",
            f"--bias={str(m['bias']).lower()}",
            "--dropout=0.0",
            "--tokenizer=gpt2",
            f"--learning_rate={LEARNING_RATE}",
            f"--min_lr={LEARNING_RATE / 10}",
            f"--weight_decay={WEIGHT_DECAY}",
            f"--beta1={BETAS[0]}",
            f"--beta2={BETAS[1]}",
            "--grad_clip=1.0",
            "--device=cpu",
            "--dtype=float32",
            "--compile=false",
            f"--out_dir={self.home / 'gptwatch-out'}",
        ]

    def measure(self, side: str, warmup: int, steps: int) -> dict:
        """One process of one side: the median ms of its last `steps` steps, every step's ms, its peak memory."""
        if side == "ours":
            return run_worker(
                "finetune",
                {
                    "ckpt": str(self.checkpoint),
                    "overrides": self.ours_overrides(),
                    "warmup": warmup + 1,
                    "steps": steps,
                },
                label="ours",
            )
        run = run_child(
            self.nanogpt_command(warmup + steps),
            cwd=self.home,
            label="nanoGPT",
            echo=lambda line: line.startswith(("iter", "Resuming", "number of")),
        )
        step_ms = parse_training(run.lines)["step_ms"][-steps:]
        if run.returncode != 0 or len(step_ms) < steps:
            return {"error": f"nanoGPT's train.py exited with status {run.returncode} after {len(step_ms)} timed steps"}
        return {
            "ms_per_step": statistics.median(step_ms),
            "step_ms": step_ms,
            "max_rss_mb": run.max_rss_mb,
            "process_wall_s": run.wall_s,
        }


def run(setup: Setup, repeats: int, warmup: int, steps: int) -> dict:
    """Prepares nanoGPT and the checkpoint, checks both read the same function, then times both sides; the
    results (`summarise`), or {"error": ...} when the two models differ."""
    machine = machine_info()
    started = time.perf_counter()
    setup.prepare()
    diff = setup.same_function()
    log(f"nanoGPT checkpoint {setup.checkpoint}: ours and nanoGPT's logits differ by at most {diff:.1e}")
    if not diff < SAME_FUNCTION_TOL:
        return {"error": f"the two models do not compute the same function (max |logit difference| {diff:.1e})"}
    raw = interleaved(
        [("finetune", "nanogpt"), ("finetune", "ours")], repeats, lambda unit: setup.measure(unit[1], warmup, steps)
    )
    settings = {
        "repeats": repeats,
        "steps": steps,
        "warmup": warmup,
        "model_args": setup.model_args,
        "block_size": setup.block,
        "batch_size": setup.batch,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    return summarise(raw, machine, settings, diff)


def summarise(raw: dict, machine: dict, settings: dict, logits_diff: float) -> dict:
    """Each side's median ms per step and peak memory over the repeats, and the ratio ours / nanoGPT taken per
    repeat (the two processes of one repeat ran next to each other)."""
    nano, ours = raw[("finetune", "nanogpt")], raw[("finetune", "ours")]
    ratios = [
        o["ms_per_step"] / n["ms_per_step"]
        for o, n in zip(ours, nano, strict=True)
        if "error" not in o and "error" not in n
    ]
    side = {
        name: {
            "ms_per_step": spread([r.get("ms_per_step") for r in runs]),
            "max_rss_mb": spread([r.get("max_rss_mb") for r in runs]),
            "errors": [r["error"] for r in runs if "error" in r],
        }
        for name, runs in (("nanogpt", nano), ("ours", ours))
    }
    machine = {**machine, "load_avg_end": [round(x, 2) for x in os.getloadavg()]}
    return {
        "machine": machine,
        "settings": settings,
        "max_logit_diff": logits_diff,
        **side,
        "ratio_ours_over_nanogpt": spread(ratios),
        "raw": {"nanogpt": nano, "ours": ours},
    }


def markdown(doc: dict, command: str) -> str:
    m, s, shape = doc["machine"], doc["settings"], doc["settings"]["model_args"]
    rows = [
        [name, figure(doc[key]["ms_per_step"], 0, " ms"), figure(doc[key]["max_rss_mb"], 0, " MiB")]
        for name, key in (("nanoGPT (its train.py)", "nanogpt"), ("gptwatch (Trainer.step)", "ours"))
    ]
    lines = [
        "# A fine-tuning step, ours beside nanoGPT's with the same weights",
        "",
        f"    {command}",
        "",
        f"{shape['n_layer']} layers x {shape['n_head']} heads, {shape['n_embd']} wide, vocabulary "
        f"{shape['vocab_size']:,}, block {s['block_size']} ({shape['block_size']:,} positions cropped), batch "
        f"{s['batch_size']}, float32, AdamW; median over {s['steps']} steps after {s['warmup']} + 1 warm-up, "
        f"per process; {s['repeats']} processes per side, interleaved. Same weights: max |logit difference| "
        f"{doc['max_logit_diff']:.1e}.",
        "",
        *table(["", "ms per step", "peak RSS (whole process)"], rows),
        "",
        f"Ratio ours / nanoGPT (per repeat): {figure(doc['ratio_ours_over_nanogpt'], 2, 'x')}",
        "",
        f"Machine: {m['cpu']}, {m['cores_usable']} cores usable, torch {m['torch']} ({m['torch_threads']} "
        f"threads), load average {m['load_avg_start']} at the start, {m['load_avg_end']} at the end; "
        f"commit {m['commit']}, {m['date']}, {s['wall_s']} s in all.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser("bench/finetune.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="processes per side, interleaved")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps before them (after the first)")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.steps < 1 or args.warmup < 0:
        parser.error("--repeats and --steps must be at least 1, --warmup at least 0")
    missing = available()
    if missing:
        log(f"cannot run: {missing}")
        return 1
    load = os.getloadavg()[0]
    if load > 0.5:
        log(
            f"warning: load average {load:.2f} at the start: other processes share this machine, so the figures "
            f"will be slower and noisier than on an idle one"
        )
    doc = run(Setup(), args.repeats, args.warmup, args.steps)
    if "error" in doc:
        log(f"{doc['error']}; not timed")
        return 1
    RESULTS_JSON.write_text(json.dumps(doc, indent=1))
    RESULTS_MD.write_text(markdown(doc, " ".join(["python bench/finetune.py", *argv])))
    print(RESULTS_MD.read_text(), end="")
    log(f"wrote {RESULTS_JSON} and {RESULTS_MD}")
    return 0 if not (doc["nanogpt"]["errors"] or doc["ours"]["errors"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
