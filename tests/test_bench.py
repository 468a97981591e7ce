"""bench/'s bookkeeping: spreads and per-repeat ratios, MFU against the right peak, nanoGPT's
output read back, random-token batches, the training step it times, --set.
(The benchmarks themselves are timings and live outside the test suite.)"""

import pytest
import torch

from bench import busy, nanogpt, report, run, workers
from bench.harness import spread


def test_a_spread_keeps_median_range_and_every_value():
    assert spread([3.0, 1.0, None, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3, "values": [3.0, 1.0, 2.0]}
    assert spread([None]) is None


def test_ratios_pair_each_repeat_of_nanogpt_with_the_same_repeat_of_ours():
    raw = {
        ("recipe", "nanogpt"): [{"wall_s": 60.0, "tokens_per_s": 100.0}, {"wall_s": 90.0, "tokens_per_s": 50.0}],
        ("recipe", "ours"): [{"wall_s": 40.0, "tokens_per_s": 150.0}, {"wall_s": 45.0, "tokens_per_s": 100.0}],
    }
    ratios = report.summarise(raw)["ratios"]
    # Per repeat: 60/40 = 1.5 and 90/45 = 2.0, not a ratio of medians (75/42.5).
    assert ratios["recipe_speedup"]["values"] == [1.5, 2.0]
    assert ratios["recipe_tokens_per_s"]["median"] == pytest.approx(1.75)


def test_a_failed_repeat_is_left_out_and_counted():
    row = report.aggregate([{"wall_s": 2.0}, {"error": "exited 1"}, {"wall_s": 4.0}])
    assert row["wall_s"]["median"] == 3.0 and row["repeats"] == 3 and row["failed_repeats"] == 1
    assert "error" in report.aggregate([{"error": "exited 1"}])


def throughput_row(compute_dtype: str, gflops: float) -> dict:
    return {"compute_dtype": compute_dtype, "achieved_gflops": gflops}


def test_mfu_divides_by_the_peak_of_the_dtype_the_run_computed_in():
    raw = {
        ("peak", "matmul"): [{"best_gflops": 50_000.0, "bf16_best_gflops": 800_000.0}],
        ("throughput", "configs/a.toml"): [throughput_row("bfloat16", 400_000.0)],
        ("throughput", "configs/b.toml"): [throughput_row("float32", 400_000.0)],
    }
    rows = report.summarise(raw)["throughput"]
    assert (rows["a"]["peak_dtype"], rows["a"]["mfu"]["median"]) == ("bfloat16", pytest.approx(0.5))
    assert (rows["b"]["peak_dtype"], rows["b"]["mfu"]["median"]) == ("float32", pytest.approx(8.0))


def test_a_cpu_peak_has_no_bf16_figure_so_bf16_runs_fall_back_to_fp32():
    raw = {
        ("peak", "matmul"): [{"best_gflops": 100.0}],
        ("throughput", "configs/a.toml"): [throughput_row("bfloat16", 50.0)],
    }
    row = report.summarise(raw)["throughput"]["a"]
    assert row["peak_dtype"] == "float32" and row["mfu"]["median"] == pytest.approx(0.5)


def test_nanogpt_output_is_read_into_evaluations_and_step_times():
    lines = [
        (1.0, "step 0: train loss 4.1676, val loss 4.1649"),
        (2.0, "iter 0: loss 4.1700, time 900.00ms, mfu -100.00%"),
        (2.1, "iter 1: loss 4.0000, time 30.00ms, mfu 1.00%"),
        (2.2, "iter 2: loss 3.9000, time 32.00ms, mfu 1.00%"),
        (9.5, "step 250: train loss 2.1000, val loss 2.2000"),
        (9.6, "saving checkpoint to out-recipe"),
    ]
    parsed = nanogpt.parse_training(lines)
    assert parsed["evals"] == [
        {"step": 0, "train_loss": 4.1676, "val_loss": 4.1649, "wall_s": 1.0},
        {"step": 250, "train_loss": 2.1, "val_loss": 2.2, "wall_s": 9.5},
    ]
    assert parsed["step_ms"] == [30.0, 32.0]  # iteration 0 carries the evaluation before it


def test_the_time_to_target_is_the_first_evaluation_at_or_below_it():
    evals = [
        {"step": 0, "val_loss": 4.0, "wall_s": 1.0},
        {"step": 50, "val_loss": 1.9, "wall_s": 5.0},
        {"step": 100, "val_loss": 1.886, "wall_s": 9.0},
        {"step": 150, "val_loss": 1.7, "wall_s": 13.0},
    ]
    figures = run._training_summary(evals, steps=150, tokens_per_step=10, wall_s=15.0)
    assert (figures["reached"], figures["step_at_target"], figures["wall_s_at_target"]) == (True, 100, 9.0)
    assert figures["tokens_per_s"] == 100.0 and figures["final_val_loss"] == 1.7


def test_synthetic_batches_are_shifted_random_tokens_of_the_padded_vocabulary():
    assert workers.SYNTHETIC_VOCAB["gpt2"] % 64 == 0 and workers.SYNTHETIC_VOCAB["gpt2"] >= 50257
    batches = workers.SyntheticBatches(50304, block_size=16, batch_size=3, device=torch.device("cpu"))
    x, y = batches.train()
    assert x.shape == y.shape == (3, 16)
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert int(torch.cat([x, y]).max()) < 50304
    assert not torch.equal(batches.train()[0], x)  # a new batch each step


def test_throughput_times_the_trainers_own_step_on_random_tokens(tmp_path):
    config = tmp_path / "tiny.toml"
    config.write_text(
        'dataset = "no-such-corpus.txt"\ntokenizer = "gpt2"\nn_layer = 1\nn_head = 2\n'
        "n_embd = 16\nblock_size = 8\nbatch_size = 2\n"
    )
    result = workers.throughput(
        {"config": str(config), "warmup": 1, "steps": 2, "synthetic": True, "overrides": ["--grad_accum=2"]}
    )
    assert result["vocab_size"] == 50304 and result["synthetic"] is True
    assert result["tokens_per_step"] == 2 * 8 * 2 and result["timed_steps"] == 2
    assert result["compute_dtype"] == "float32" and result["last_loss"] > 0


def test_a_bad_set_is_refused_in_one_line():
    with pytest.raises(SystemExit) as info:
        run.main(["--only", "throughput", "--set", "n_head=three"])
    message = str(info.value)
    assert message.startswith("error: --set with configs/") and "n_head" in message and "\n" not in message


def test_finetune_times_nanogpts_train_py_and_our_trainer_on_the_same_weights(tmp_path):
    """bench/finetune.py end to end with a tiny model: nanoGPT's model.py builds it, both read its checkpoint (the
    same function), nanoGPT's train.py and our Trainer.step() each train it in a process of their own."""
    from conftest import require_gpt2

    from bench import finetune

    if finetune.available():
        pytest.skip(finetune.available())
    require_gpt2()  # no meta.pkl: GPT-2's BPE
    tiny = {
        "n_layer": 1,
        "n_head": 2,
        "n_embd": 16,
        "block_size": 32,
        "bias": True,
        "vocab_size": 50257,
        "dropout": 0.0,
    }
    doc = finetune.run(finetune.Setup(tiny, block=16, batch=2, home=tmp_path / "nanogpt"), repeats=1, warmup=0, steps=2)
    assert doc["max_logit_diff"] < finetune.SAME_FUNCTION_TOL
    for side in ("nanogpt", "ours"):
        assert doc[side]["errors"] == [] and doc[side]["max_rss_mb"]["median"] > 0
        assert len(doc["raw"][side][0]["step_ms"]) == 2
    assert doc["raw"]["ours"][0]["tokens_per_step"] == 2 * 16
    assert doc["ratio_ours_over_nanogpt"]["n"] == 1
    assert "| gptwatch (Trainer.step) |" in finetune.markdown(doc, "python bench/finetune.py")


def demo_run(wall_s: float, **floors) -> dict:
    return {"wall_s": wall_s, "command": "python train.py", **floors}


def test_each_demo_run_is_timed_against_the_nanogpt_recipe_of_its_own_repeat():
    from bench import demos

    default = {
        "best_head": "L0H2",
        "referent": 0.97,
        "top1": 1.0,
        "attention": {"dog": 0.98, "ball": 0.01},
        "continuation": 1.0,
        "continuation_ablated": 0.15,
        "watch_points": 26,
    }
    induction = {
        "best_induction_head": "L1H1",
        "induction": 0.8,
        "gain": 3.0,
        "gain_without_top_two": 0.3,
        "previous_token_head": "L0H0",
        "previous_token": 0.8,
        "gain_without_previous_token_head": 0.6,
        "watch_points": 41,
        "phase_step": 1100,
        "phase_s": 9.5,
    }
    raw = {
        ("nanogpt", "recipe"): [{"wall_s": 80.0}, {"wall_s": 100.0}],
        ("default", 1337): [demo_run(12.0, **default), demo_run(10.0, **default)],
        ("induction", 1): [demo_run(40.0, **induction), {"error": "train.py exited with status 1"}],
    }
    results = demos.summarise(raw)
    # Per repeat: 12/80 and 10/100, not a ratio of medians.
    assert results["default:1337"]["x_nanogpt"]["values"] == [0.15, 0.1]
    assert results["induction:1"]["x_nanogpt"]["values"] == [0.5] and results["induction:1"]["failed"] == 1
    doc = {
        "command": "python bench/demos.py",
        "results": results,
        "machine": {"cpu": "cpu", "cores": 2, "date": "today", "commit": "abc", "load_avg_start": [0.1]},
    }
    page = demos.render(doc)
    assert "| 1337 | 11.0 (10.0-12.0, n=2) | 0.125x (0.100-0.150, n=2) | L0H2 0.970 |" in page
    assert "1100 / 9.5 s" in page and "| 90% |" in page and "| 80% |" in page  # 1 - 0.3/3.0, 1 - 0.6/3.0


def test_a_floor_read_from_random_sequences_holds_only_when_its_whole_spread_does():
    from bench.demos import judged

    assert judged(0.95, 0.004, 0.70) == "0.950 ± 0.004"
    assert judged(0.71, 0.02, 0.70) == "0.710 ± 0.020 (within its spread)"  # another draw could fall below
    assert judged(0.65, 0.02, 0.70) == "0.650 ± 0.020 (below)"
    assert judged(0.81, None, 0.70) == "0.81"  # a result from before figures had a spread


def test_the_busy_machine_ratios_pair_each_run_with_the_same_repeat_of_the_other():
    raw = {
        ("A", "idle"): [{"wall_s": 8.0}, {"wall_s": 10.0}],
        ("B", "idle"): [{"wall_s": 8.0}, {"wall_s": 9.0}],
        ("A", "busy"): [{"wall_s": 80.0, "device": "2 CPU threads"}, {"wall_s": 100.0, "device": "2 CPU threads"}],
        ("B", "busy"): [{"wall_s": 16.0, "device": "1 CPU thread (...)"}, {"error": "exited 1"}],
    }
    summary = busy.summarise(raw)
    assert summary["busy / idle"]["A"]["values"] == [10.0, 10.0]
    assert summary["busy / idle"]["B"]["values"] == [2.0]  # the failed repeat is left out, not paired with another
    assert summary["B / A"]["busy"]["values"] == [0.2] and summary["B / A"]["idle"]["values"] == [1.0, 0.9]
    assert summary["wall_s"]["A busy"]["median"] == 90.0
    assert summary["threads beside it"] == {"A": "2 CPU threads", "B": "1 CPU thread (...)"}
