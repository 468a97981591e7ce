"""End to end: a tiny training run, its checkpoint, TensorBoard logs, sampling, two processes, two nodes."""

import contextlib
import os
import re
import socket
import subprocess
import sys

import pytest
import torch

import sample
import train
from common import cores
from common.cli import run_cli
from common.settings import TrainConfig
from tests import commands
from trainer import runtime

# A run long enough to learn something: 40 steps of a 2-layer model on tests.commands's corpus.
LEARNING = (
    "--n_layer=2",
    "--n_embd=32",
    "--block_size=32",
    "--batch_size=8",
    "--max_iters=40",
    "--eval_interval=20",
    "--learning_rate=3e-3",
    "--warmup_iters=5",
    "--sample_tokens=20",
    "--sample_prompt=the",
)


def tiny_args(tmp_path, *extra):
    return commands.tiny_args(tmp_path, *LEARNING, *extra)


def test_training_lowers_the_loss_and_writes_checkpoint_and_logs(tmp_path, capsys):
    assert run_cli(train.main, tiny_args(tmp_path)) == 0
    out = capsys.readouterr().out
    # TensorBoard opened on this run's own folder: its heads, and no other training's
    run = tmp_path / "runs" / "t"
    assert f"open TensorBoard: tensorboard --logdir {run} --samples_per_plugin=images=200,text=200" in out

    checkpoint = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert checkpoint["step"] == 40 and checkpoint["model_config"]["n_layer"] == 2

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "runs" / "t")).Reload()
    losses = [event.value for event in events.Scalars("loss/val")]
    assert len(losses) == 3 and losses[-1] < losses[0] - 1.0
    assert checkpoint["best_val_loss"] == pytest.approx(min(losses))
    scalars = set(events.Tags()["scalars"])
    assert {"loss/train", "loss/val", "lr", "grad_norm", "throughput/tokens_per_sec"} <= scalars
    assert "sample/text_summary" in events.Tags()["tensors"]


def test_output_to_a_file_gets_plain_lines_and_how_long_the_run_will_take_not_a_progress_bar(tmp_path):
    """stdout redirected (a subprocess's pipe): no bar redrawn into it, a line every tenth of the run, and among the
    first lines how long the run will take here; stderr empty on a clean run."""
    code, out, err = commands.run("train", tiny_args(tmp_path, "--watch_interval=5"), subprocess_=True)
    assert (code, err) == (0, "")
    assert "\r" not in out and "it/s" not in out
    lines = out.splitlines()
    (estimate,) = [n for n, line in enumerate(lines) if "of training left here" in line]
    assert estimate < 8 and re.search(
        r"^about \d+ s of training left here \(\d+ steps at [\d.,]+ a second", lines[estimate]
    )
    progress = [line for line in lines if re.match(r"step \d+/40: loss ", line)]
    assert [line.split("/")[0] for line in progress] == [f"step {n}" for n in range(4, 40, 4)]


def test_a_busy_machine_is_named_with_its_load_average(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(os, "getloadavg", lambda: (7.7, 5.0, 2.0))
    assert train.busy_machine() == (
        "; this machine is busy (load average 7.7 on 2 cores): other programs share its CPUs, so this takes longer "
        "than on an idle machine"
    )
    monkeypatch.setattr(os, "getloadavg", lambda: (2.1, 2.0, 2.0))  # a run's own two threads: not busy
    assert train.busy_machine() == ""


# user nice system idle iowait irq softirq steal, in clock ticks: cpu0 busy 3 of 3 ticks (steal counts, the hypervisor
# gave it to another machine), cpu1 waited for a disk (idle), cpu2 busy but not a core this process may use.
STAT_BEFORE = (
    "cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 100 0 50 900 0 0 0 0 0 0\ncpu1 10 0 5 900 40 0 0 0 0 0\ncpu2 0 0 0 0 0 0 0 0 0 0\n"
)
STAT_AFTER = (
    "cpu  9 9 9 9 9 9 9 9 9 9\ncpu0 102 0 50 900 0 0 0 1 0 0\ncpu1 10 0 5 901 42 0 0 0 0 0\ncpu2 3 0 0 0 0 0 0 0 0 0\n"
)


def test_the_cores_other_programs_keep_busy_are_read_from_two_looks_at_proc_stat():
    assert cores.cpu_times(STAT_BEFORE, {0, 1}) == {0: (150, 1050), 1: (15, 955)}
    assert cores.busy_cores(STAT_BEFORE, STAT_AFTER, {0, 1}) == 1.0  # cpu0 whole, cpu1 not at all; cpu2 not ours
    assert cores.busy_cores(STAT_BEFORE, STAT_AFTER, {0, 1, 2}) == 2.0


@pytest.fixture
def cores_at_start(monkeypatch):
    """Sets what `common.cores` saw as the run started, and torch's threads back as they were afterwards."""
    threads = torch.get_num_threads()
    yield lambda seen: monkeypatch.setattr(cores, "_at_start", seen)
    torch.set_num_threads(threads)


def test_on_a_busy_machine_a_run_takes_the_cores_left_free_and_says_so_first(tmp_path, cores_at_start, capsys):
    torch.set_num_threads(2)  # torch's default on 2 cores
    cores_at_start(cores.Cores(usable=2, busy=1.9))
    assert run_cli(train.main, commands.tiny_args(tmp_path)) == 0
    device = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("device: "))
    assert device.endswith(
        ", 1 CPU thread (other programs kept 1.9 of its 2 cores busy as it started; --threads=N to choose)"
    )
    assert torch.get_num_threads() == 1


@pytest.mark.parametrize(
    "seen, threads, expected",
    [
        (None, 0, 2),  # idle: torch's default, as before
        (cores.Cores(usable=2, busy=0.6), 0, 1),  # one core busy: the other
        (cores.Cores(usable=2, busy=0.4), 0, 2),  # less than half a core: idle
        (cores.Cores(usable=2, busy=3.0), 0, 1),  # busier than its cores: one thread still
        (cores.Cores(usable=2, busy=2.0), 2, 2),  # a `threads` setting wins
    ],
)
def test_the_threads_are_torchs_default_unless_other_programs_keep_cores_busy(cores_at_start, seen, threads, expected):
    torch.set_num_threads(2)
    cores_at_start(seen)
    rt = runtime.setup(TrainConfig(threads=threads))
    assert torch.get_num_threads() == expected and bool(rt.threads_note) == (expected < 2 and not threads)


@pytest.mark.skipif(not os.path.exists("/proc/stat"), reason="the cores are read from Linux's /proc/stat")
def test_the_cores_are_looked_at_before_torch_loads_unless_the_environment_says(monkeypatch):
    """OpenMP reads OMP_WAIT_POLICY once, as torch loads: set to PASSIVE there on a busy machine, its waiting threads
    sleep rather than spin on the cores other programs need."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.setattr(cores, "_at_start", None)
    monkeypatch.setattr(cores, "busy_cores", lambda before, after, cpus: len(cpus) - 0.9)  # all but one busy
    cores.look_before_torch_loads()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE" and cores.threads(8) == (1, cores._at_start.note())

    monkeypatch.setattr(cores, "_at_start", None)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # torchrun's, or the user's: theirs
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    cores.look_before_torch_loads()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE" and cores.threads(8) == (8, "")


def test_sample_streams_text_from_the_checkpoint(tmp_path, capsys):
    assert run_cli(train.main, tiny_args(tmp_path)) == 0
    capsys.readouterr()
    code = run_cli(
        sample.main,
        [
            f"--out_dir={tmp_path / 'out'}",
            "--prompt",
            "the dog",
            "--max_new_tokens=30",
            "--num_samples=2",
            "--temperature=0",
        ],
    )
    assert code == 0
    first, second = capsys.readouterr().out.split("\n" + "-" * 40 + "\n")
    assert first.startswith("the dog") and len(first) == len("the dog") + 30
    assert second == first + "\n"  # greedy: both samples agree
    # With and without the KV cache, greedy text is the same.
    run_cli(
        sample.main,
        [f"--out_dir={tmp_path / 'out'}", "--prompt=the dog", "--max_new_tokens=30", "--temperature=0", "--no_cache"],
    )
    assert capsys.readouterr().out == first + "\n"
    # --ablate applies to plain sampling too: every head removed, the text changes; cached or not, it agrees.
    every_head = [f"--ablate=L{layer}H{head}" for layer in range(2) for head in range(2)]
    ablated = []
    for cache in ([], ["--no_cache"]):
        assert (
            run_cli(
                sample.main,
                [
                    f"--out_dir={tmp_path / 'out'}",
                    "--prompt=the dog",
                    "--max_new_tokens=30",
                    "--temperature=0",
                    *every_head,
                    *cache,
                ],
            )
            == 0
        )
        ablated.append(capsys.readouterr().out)
    assert ablated[0] == ablated[1] != first + "\n" and ablated[0].startswith("the dog")


def test_gradient_accumulation_keeps_tokens_per_step(tmp_path):
    from bench.harness import load_config
    from trainer import runtime
    from trainer.start import starting_from
    from trainer.trainer import Trainer

    args = tiny_args(tmp_path, "--grad_accum=2", "--batch_size=4")
    cfg = load_config(args[0], args[1:])
    trainer = Trainer.from_start(starting_from(cfg).prepared(), runtime.setup(cfg))
    drawn = []
    draw = trainer.batches.train
    trainer.batches.train = lambda: drawn.append(1) or draw()
    trainer.step()
    assert len(drawn) == 2 and trainer.tokens_per_step == 256  # 4 sequences x 32 tokens x 2 micro-batches


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without distributed")
def test_two_cpu_processes_end_with_identical_parameters(tmp_path):
    args = tiny_args(tmp_path, "--max_iters=6", "--eval_interval=3", "--grad_accum=2", "--sample_tokens=0")
    # Prepare once in this process so the two ranks do not race to write the cache.
    from data.prepare import prepare

    prepare(str(tmp_path / "corpus.txt"), "char", tmp_path / "prep", quiet=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "train.py",
        *args,
    ]
    with commands.started(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
        out, err = proc.communicate(timeout=commands.PATIENCE)
    assert proc.returncode == 0, out[-2000:] + err[-4000:]
    assert "parameters identical on all 2 processes: True" in out
    assert "x 2 processes, 512 tokens per step" in out  # same as one process with grad_accum=2


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch built without distributed")
def test_two_nodes_meet_through_c10d_rendezvous(tmp_path):
    # The README's multi-node command, with both "nodes" on this machine: two torchrun
    # launchers, one process each, that find each other only through the rendezvous.
    args = tiny_args(tmp_path, "--max_iters=4", "--eval_interval=2", "--grad_accum=2", "--sample_tokens=0")
    from data.prepare import prepare

    prepare(str(tmp_path / "corpus.txt"), "char", tmp_path / "prep", quiet=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    launch = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        "--nproc_per_node=1",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{free_port()}",
        "--rdzv_id=two-nodes",
        "train.py",
        *args,
    ]
    with contextlib.ExitStack() as stack:
        nodes = [
            stack.enter_context(
                commands.started(launch, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
            )
            for _ in range(2)
        ]
        results = [node.communicate(timeout=commands.PATIENCE) for node in nodes]
    for node, (out, err) in zip(nodes, results, strict=True):
        assert node.returncode == 0, out[-2000:] + err[-4000:]
    outputs = [out for out, _ in results]
    # Rank 0 (on whichever node the rendezvous made it) alone reports and saves.
    reporting = [out for out in outputs if "parameters identical on all 2 processes: True" in out]
    assert len(reporting) == 1 and "x 2 processes" in reporting[0]
    assert (tmp_path / "out" / "ckpt.pt").is_file()


class _Scripted:
    """A stand-in model whose 'generation' is a fixed list of token ids."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def generate_stream(self, idx, max_new_tokens, **kwargs):
        for token in self.ids[:max_new_tokens]:
            yield torch.tensor([[token]])


def _sampling_args(**changes):
    from argparse import Namespace

    return Namespace(
        **{
            "seed": 0,
            "temperature": 0.0,
            "top_k": None,
            "top_p": None,
            "no_cache": False,
            "num_samples": 1,
            "max_new_tokens": 100,
            **changes,
        }
    )


def test_sampling_decodes_only_the_new_tokens_of_a_long_prompt(capsys):
    """A long prompt is decoded once per sample, not again for every new token (a 5 MB prompt took 37 s)."""
    from data.tokenizer import CharTokenizer

    decoded = []

    class Counting(CharTokenizer):
        def decode(self, ids):
            decoded.append(len(ids))
            return super().decode(ids)

    tokenizer = Counting.from_text(commands.TEXT)
    prompt, new = tokenizer.encode(commands.TEXT * 20), tokenizer.encode("the dog saw the ball")
    sample.stream_samples(_Scripted(new), tokenizer, prompt, _sampling_args(num_samples=2), torch.device("cpu"))
    text = commands.TEXT * 20 + "the dog saw the ball\n"
    assert capsys.readouterr().out == text + "-" * 40 + "\n" + text
    assert sum(decoded) <= 2 * (len(prompt) + len(new))  # was len(new) times the prompt, per sample


def test_sampling_never_prints_half_a_character():
    """GPT-2's BPE splits an emoji across tokens: nothing is printed until the character is whole."""
    from conftest import require_gpt2

    from data.tokenizer import GPT2Tokenizer

    require_gpt2()
    tokenizer = GPT2Tokenizer.from_text("a \N{PILE OF POO} b")
    new = tokenizer.encode(" \N{PILE OF POO} b")
    assert len(new) >= 4  # the emoji takes three tokens
    written = []
    out = type("Out", (), {"write": lambda self, text: written.append(text), "flush": lambda self: None})()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "stdout", out)
        sample.stream_samples(_Scripted(new), tokenizer, tokenizer.encode("a"), _sampling_args(), torch.device("cpu"))
    assert "".join(written) == "a \N{PILE OF POO} b\n"
    assert not any("\ufffd" in text for text in written)


def test_a_warning_during_training_is_printed_above_the_progress_bar(tmp_path):
    """The bar is cleared, the warning printed on a line of its own, the bar drawn again below it."""
    import contextlib
    import io

    class Terminal(io.StringIO):
        """Output that says it is a terminal: a bar is drawn only where someone watches it redrawn."""

        def isatty(self) -> bool:
            return True

    long_sentence = "the dog saw the ball and it rolled away " * 3  # longer than the block: a warning
    both = Terminal()
    with contextlib.redirect_stdout(both), contextlib.redirect_stderr(both):
        code = run_cli(train.main, tiny_args(tmp_path, f"--watch_sentences=[{long_sentence!r}]".replace("'", '"')))
    assert code == 0
    before, warning = both.getvalue().split("warning: attention of", 1)
    assert "train:" in before  # the bar was on the terminal when the warning came
    # On a terminal: the bar's line, then "\r", spaces over all of it and "\r" again: a blank line to write on.
    bar, cleared, rest = before.rsplit("\n", 1)[-1].rsplit("\r", 2)[-3:]
    assert rest == "" and cleared.strip() == "" and len(cleared) >= len(bar.strip("\r")), repr(before[-200:])
    assert warning.split("\n", 1)[0].endswith("(block_size)")  # the warning's line holds nothing else


def test_an_attention_only_run_with_relative_positions_records_them_and_resumes_only_with_them(tmp_path):
    options = ("--attn_only=true", "--relative_positions=true")
    args = commands.tiny_args(tmp_path, "--n_layer=2", "--max_iters=4", "--eval_interval=2", *options)
    code, _, err = commands.run_train(args)
    assert code == 0, err
    checkpoint = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert checkpoint["model_config"]["attn_only"] is checkpoint["model_config"]["relative_positions"] is True
    assert checkpoint["train_config"]["attn_only"] is True
    assert not any(".mlp." in name or name == "wpe.weight" for name in checkpoint["model"])
    assert checkpoint["model"]["blocks.1.attn.position_bias"].any()  # trained away from its zeros
    code, _, err = commands.run_train([*args[:-2], "--max_iters=6", "--resume"])  # without them: refused, naming one
    assert code == 2 and "attn_only is False (the checkpoint's: True)" in err
    code, _, err = commands.run_train([*args, "--max_iters=6", "--resume"])
    assert code == 0, err
    assert torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)["step"] == 6


def test_a_checkpoint_from_before_the_options_resumes_as_one_without_them(tmp_path):
    """A model_config without attn_only or relative_positions (every checkpoint written before they existed,
    and every one without them since) reads as both off."""
    args = commands.tiny_args(tmp_path, "--max_iters=2", "--eval_interval=2")
    assert commands.run_train(args)[0] == 0
    saved = torch.load(tmp_path / "out" / "ckpt.pt", weights_only=True)
    assert not {"attn_only", "relative_positions"} & {*saved["model_config"], *saved["train_config"]}
    code, _, err = commands.run_train([*args, "--max_iters=4", "--resume", "--relative_positions=true"])
    assert code == 2 and "relative_positions is True (the checkpoint's: False)" in err
    code, _, err = commands.run_train([*args, "--max_iters=4", "--resume"])
    assert code == 0, err
