"""Every command the two programs print runs as printed, copied whole from the line that shows it (the
sample command with a prompt the model knows, TensorBoard, `--help`, the command that resumes a stopped
run); and a prompt the model cannot read names words it can, which then work."""

from __future__ import annotations

import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import time

import pytest
from conftest import require_gpt2

from data.batches import Batches
from tests.commands import PATIENCE, ROOT, TEXT, TINY, run_sample, run_train, started

COMMAND = re.compile(r"(?:^|: )((?:python|tensorboard) \S.*)$")


def commands(out: str) -> list[str]:
    """The commands in a program's output: each line's text after "label: " that starts a command."""
    return [match[1] for line in out.splitlines() if (match := COMMAND.search(line))]


def run_printed(command: str, timeout: float = PATIENCE) -> subprocess.CompletedProcess:
    """The command as a user pastes it into a shell, in the repository."""
    return subprocess.run(["bash", "-c", command], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def serves(command: str, timeout: float = PATIENCE) -> str:
    """Starts a printed TensorBoard command and stops it once it says where it serves; its output so far."""
    if shutil.which("tensorboard") is None:
        pytest.skip("the tensorboard command is not on PATH (pip install tensorboard puts it there)")
    seen, deadline = b"", time.monotonic() + timeout
    with started(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as process:
        while b"http://" not in seen and time.monotonic() < deadline and process.poll() is None:
            ready, _, _ = select.select([process.stdout], [], [], 1.0)
            if ready:
                seen += os.read(process.stdout.fileno(), 1 << 16)
    return seen.decode(errors="replace")


def own_text_args(tmp_path, *extra: str) -> list[str]:
    """train.py on a text of one's own with no config file (the chosen settings), made tiny on the command line."""
    corpus = tmp_path / "tale.txt"
    corpus.write_text(TEXT)
    return [
        f"--dataset={corpus}",
        f"--data_dir={tmp_path / 'prep'}",
        f"--out_dir={tmp_path / 'out'}",
        f"--log_dir={tmp_path / 'runs'}",
        *TINY,
        *extra,
    ]


def test_every_command_a_run_on_ones_own_text_prints_runs_as_printed(tmp_path):
    code, out, err = run_train(own_text_args(tmp_path))
    assert (code, err) == (0, "")
    found = commands(out)
    kinds = {command.split()[1] if command.startswith("python") else "tensorboard" for command in found}
    assert kinds == {"train.py", "sample.py", "tensorboard"}, found
    for command in found:
        if command.startswith("tensorboard"):  # the run's own folder, and every image and text it logs
            assert f"--logdir {tmp_path / 'runs'}/" in command and "--samples_per_plugin=" in command, command
            assert "http://" in serves(command), command
            continue
        done = run_printed(command)
        assert done.returncode == 0 and done.stderr == "", (command, done.stderr)
        if "sample.py" in command:
            prompt = re.search(r"--prompt '([^']*)'", command)[1]
            assert done.stdout.startswith(prompt), done.stdout  # the model continues the prompt it was given
    # sample.py --attention adds its heatmaps to the run, and prints how to see them there.
    code, out, err = run_sample([f"--out_dir={tmp_path / 'out'}", "--attention", "the dog saw the ball and it"])
    assert (code, err) == (0, "")
    (tensorboard,) = commands(out)
    assert "--samples_per_plugin=" in tensorboard and "http://" in serves(tensorboard)


def test_the_demos_sample_command_uses_a_prompt_it_knows(tmp_path):
    require_gpt2()
    args = [
        "--dataset=pronouns",
        f"--data_dir={tmp_path / 'prep'}",
        f"--out_dir={tmp_path / 'out'}",
        f"--log_dir={tmp_path / 'runs'}",
        *TINY,
    ]
    code, out, err = run_train(args)
    assert (code, err) == (0, "")
    (sample,) = [command for command in commands(out) if "sample.py" in command]
    assert sample == f"python sample.py --out_dir={tmp_path / 'out'} --prompt 'The dog fetched the ball and she'"
    done = run_printed(sample)
    assert done.returncode == 0 and done.stderr == "" and done.stdout.startswith("The dog fetched the ball and she")


def test_the_command_that_resumes_a_stopped_run_runs_as_printed(tmp_path, monkeypatch):
    original = Batches.train

    def train_batch(self):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C during the first step
        return original(self)

    monkeypatch.setattr(Batches, "train", train_batch)
    code, out, _ = run_train(own_text_args(tmp_path))
    assert code == 128 + signal.SIGINT
    (resume,) = [command for command in commands(out) if "--resume" in command]
    monkeypatch.undo()
    done = run_printed(resume)
    assert done.returncode == 0, done.stderr
    assert "done: 5 steps" in done.stdout  # from step 1 to the run's 6


@pytest.mark.parametrize("which, prompt", [("gpt2", "zebras juggle quietly"), ("char", "ZEBRA")])
def test_a_prompt_the_model_cannot_read_names_words_it_can_and_they_work(trained, tmp_path, which, prompt):
    if which == "gpt2":
        require_gpt2()
    checkpoint = getattr(trained, which)
    code, _, err = run_sample([f"--out_dir={checkpoint}", "--prompt", prompt, "--max_new_tokens=5"])
    assert code == 1 and err.startswith("error: ") and err.count("\n") == 1
    examples = re.search(r"it knows \(([^)]*)\)|e\.g\. ((?:'[^']*'(?:, )?)+)", err)
    assert examples, err
    known = re.findall(r"'([^']*)'", examples[0])
    assert len(known) >= 5, err
    word = next(w for w in known if w.strip())
    code, out, err = run_sample([f"--out_dir={checkpoint}", "--prompt", word, "--max_new_tokens=5"])
    assert (code, err) == (0, "") and out.startswith(word)


def test_the_command_a_missing_checkpoint_suggests_trains_into_that_folder(tmp_path):
    """Running it is a whole demo run, so it is parsed here, as train.py parses it."""
    from common.settings import parse_command_line

    folder = tmp_path / "my run"
    code, _, err = run_sample([f"--out_dir={folder}"])
    assert code == 1 and err.count("\n") == 1
    (command,) = commands(err.rstrip("\n"))
    words = shlex.split(command)
    assert words[:2] == ["python", "train.py"] and parse_command_line(words[2:]) == (None, {"out_dir": str(folder)})
