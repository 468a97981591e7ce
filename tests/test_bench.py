"""bench/run.py's bookkeeping: which peak an MFU divides by, random-token batches, --set.
(The benchmarks themselves are timings and live outside the test suite.)"""

import importlib.util
import sys

import pytest
import torch

from tests.cli import ROOT


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_run", ROOT / "bench" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


bench = load_bench()


def throughput_row(compute_dtype: str, **extra) -> dict:
    return {"dataset": "tinystories", "tokenizer": "gpt2", "compute_dtype": compute_dtype,
            "achieved_gflops": 400_000.0, **extra}


def test_mfu_divides_by_the_peak_of_the_dtype_the_run_computed_in():
    peak = {"best_gflops": 50_000.0, "bf16_best_gflops": 800_000.0}
    raw = {("peak", "fp32_matmul"): [peak],
           ("throughput", "configs/a.toml"): [throughput_row("bfloat16")],
           ("throughput", "configs/b.toml"): [throughput_row("float32")]}
    results = bench.summarise(raw)
    a, b = results["throughput"]["a"], results["throughput"]["b"]
    assert (a["peak_dtype"], a["mfu"]) == ("bfloat16", pytest.approx(0.5))
    assert (b["peak_dtype"], b["mfu"]) == ("float32", pytest.approx(8.0))


def test_a_cpu_peak_has_no_bf16_figure_so_bf16_runs_fall_back_to_fp32():
    raw = {("peak", "fp32_matmul"): [{"best_gflops": 100.0}],
           ("throughput", "configs/a.toml"): [throughput_row("bfloat16", achieved_gflops=50.0)]}
    row = bench.summarise(raw)["throughput"]["a"]
    assert row["peak_dtype"] == "float32" and row["mfu"] == pytest.approx(0.5)


def test_only_the_recipe_as_nanogpt_ran_it_is_compared_with_nanogpt():
    recipe = {"dataset": "shakespeare", "tokenizer": "char", "compute_dtype": "float32", "achieved_gflops": 50.0,
              "tokens_per_s": 9900.0, "ms_per_step": 77.0}
    raw = {("peak", "fp32_matmul"): [{"best_gflops": 100.0}],
           ("throughput", "configs/plain.toml"): [dict(recipe)],
           ("throughput", "configs/random.toml"): [dict(recipe, synthetic=True)],
           ("throughput", "configs/changed.toml"): [dict(recipe, overrides=["--compile=true"])]}
    rows = bench.summarise(raw)["throughput"]
    assert rows["plain"]["vs_nanogpt"]["tokens_per_s"] == pytest.approx(1.0)
    assert "vs_nanogpt" not in rows["random"] and "vs_nanogpt" not in rows["changed"]


def test_synthetic_batches_are_shifted_random_tokens_of_the_padded_vocabulary():
    assert bench.SYNTHETIC_VOCAB["gpt2"] % 64 == 0 and bench.SYNTHETIC_VOCAB["gpt2"] >= 50257
    batches = bench.SyntheticBatches(50304, block_size=16, batch_size=3, device=torch.device("cpu"))
    x, y = batches.train()
    assert x.shape == y.shape == (3, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(torch.cat([x, y]).max()) < 50304
    assert not torch.equal(batches.train()[0], x)  # a new batch each step


def test_throughput_worker_runs_on_random_tokens_without_a_corpus(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text('dataset = "no-such-corpus.txt"\ntokenizer = "gpt2"\nn_layer = 1\nn_head = 2\n'
                      'n_embd = 16\nblock_size = 8\nbatch_size = 2\n')
    result = bench.worker_throughput({"config": str(config), "warmup": 1, "steps": 2, "synthetic": True,
                                      "overrides": ["--grad_accum=2"]})
    assert result["vocab_size"] == 50304 and result["synthetic"] is True
    assert result["tokens_per_step"] == 2 * 8 * 2 and result["timed_steps"] == 2
    assert result["compute_dtype"] == "float32"


def test_a_bad_set_is_refused_in_one_line():
    with pytest.raises(SystemExit) as info:
        bench.main(["--only", "throughput", "--set", "n_head=three"])
    message = str(info.value)
    assert message.startswith("error: --set with configs/") and "n_head" in message and "\n" not in message
