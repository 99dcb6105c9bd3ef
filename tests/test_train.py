"""Associative recall: the model's gradient, the data, checkpoints, resuming, and learning."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from qkv.cli import main
from qkv.nn.gradcheck import max_rel_error, numerical_grad
from qkv.tasks import RecallConfig, RecallModel, RecallTask, Run
from qkv.tasks import checkpoint as ckpt

pytest.importorskip("safetensors")
SMALL = RecallConfig(n_keys=16, n_values=16, n_pairs=6, d_model=16, n_heads=2, batch=64,
                     lr=3e-3, seed=3)


def test_task_sequences_are_well_formed():
    c = RecallConfig(n_keys=20, n_values=7, n_pairs=9)
    b = RecallTask(c).sample(np.random.default_rng(0), 500)
    assert b.keys.shape == b.values.shape == (500, 10)
    pairs = b.keys[:, :-1]
    assert all(len(set(row)) == 9 for row in pairs)  # distinct keys in a sequence
    rows = np.arange(500)
    np.testing.assert_array_equal(b.keys[:, -1], pairs[rows, b.slot])  # query = matching key
    np.testing.assert_array_equal(b.target, b.values[rows, b.slot])
    assert (b.values[:, -1] == 7).all() and b.values[:, :-1].max() < 7
    assert b.slot.min() == 0 and b.slot.max() == 8  # every slot is used


def test_held_out_is_independent_of_training_data():
    task = RecallTask(SMALL)
    run = Run.fresh(SMALL)
    train = task.sample(run.rng, 200)
    held = task.held_out(200)
    assert not np.array_equal(train.keys, held.keys)
    np.testing.assert_array_equal(held.keys, task.held_out(200).keys)  # fixed


def test_recall_model_backward_matches_finite_differences():
    model = RecallModel(dataclasses.replace(SMALL, d_model=8), dtype=np.float64)
    g = np.random.default_rng(0)
    for p in model.params.values():
        p += 0.1 * g.standard_normal(p.shape)
    batch = RecallTask(model.config).sample(np.random.default_rng(1), 5)
    logits, ctx = model.forward(batch)
    cot = g.standard_normal(logits.shape)
    grads = model.backward(ctx, cot)
    assert set(grads) == set(model.params)

    def loss():
        return float((model.forward(batch)[0] * cot).sum())

    errors = {n: max_rel_error(grads[n], numerical_grad(loss, p))
              for n, p in model.params.items()}
    assert max(errors.values()) < 1e-7, errors  # FD error ~1e-9, see tests/test_nn.py


def test_checkpoint_round_trip_is_bit_identical(tmp_path):
    run = Run.fresh(SMALL)
    run.train(7, eval_every=5, held_out=50)
    path = tmp_path / "r.safetensors"
    run.save(path)
    back = Run.load(path)
    assert back.config == run.config and back.step == 7 and back.history == run.history
    for name, p in run.model.params.items():
        q = back.model.params[name]
        assert q.dtype == p.dtype and q.tobytes() == p.tobytes(), name
    for name, a in run.opt.state_dict().items():
        assert back.opt.state_dict()[name].tobytes() == a.tobytes(), name
    assert back.rng.bit_generator.state == run.rng.bit_generator.state
    tensors, meta = ckpt.load(path)
    assert meta["task"] == "recall" and all(not k.startswith("_") for k in tensors)


def test_resume_continues_bit_for_bit(tmp_path):
    straight = Run.fresh(SMALL)
    straight.train(30, eval_every=10, held_out=50)
    path = tmp_path / "half.safetensors"
    first = Run.fresh(SMALL)
    first.train(15, eval_every=10, held_out=50, checkpoint=path)
    resumed = Run.load(path)
    assert resumed.step == 15
    resumed.train(30, eval_every=10, held_out=50)
    for name, p in straight.model.params.items():
        assert resumed.model.params[name].tobytes() == p.tobytes(), name
    # the interrupted run also evaluated at its stopping point, step 15
    common = [h for h in resumed.history if h["step"] != 15]
    assert [(h["step"], h["accuracy"]) for h in common] == \
        [(h["step"], h["accuracy"]) for h in straight.history]


def test_same_seed_same_run_other_seed_other_run():
    a, b, c = Run.fresh(SMALL), Run.fresh(SMALL), Run.fresh(dataclasses.replace(SMALL, seed=4))
    for r in (a, b, c):
        r.train(5, eval_every=5, held_out=20)
    w = "attn.w_q"
    assert a.model.params[w].tobytes() == b.model.params[w].tobytes()
    assert a.model.params[w].tobytes() != c.model.params[w].tobytes()


def test_load_refuses_what_is_not_a_checkpoint(tmp_path):
    from safetensors.numpy import save_file

    other = tmp_path / "other.safetensors"
    save_file({"x": np.zeros(2)}, str(other))
    with pytest.raises(ValueError, match="not a qkv checkpoint"):
        Run.load(other)
    with pytest.raises(FileNotFoundError, match="qkv train recall --checkpoint"):
        Run.load(tmp_path / "missing.safetensors")


def test_training_learns_the_lookup():
    """A smaller task than the default, so it runs in a few seconds: still must reach ≥ 99%."""
    config = RecallConfig(n_keys=64, n_values=64, n_pairs=16, seed=0)
    run = Run.fresh(config)
    start = run.train(1, eval_every=1, held_out=1000)
    final = run.train(400, eval_every=100, held_out=1000, stop_at=0.995)
    assert start["accuracy"] < 0.1  # chance is 1/64: it did not know before training
    assert final["accuracy"] >= 0.99 and final["top_weight_hit"] >= 0.99, final


def test_cli_refuses_to_change_a_resumed_run(tmp_path, capsys):
    path = tmp_path / "r.safetensors"
    args = ["train", "recall", "--keys", "16", "--values", "16", "--pairs", "6", "--d-model",
            "16", "--steps", "4", "--eval-every", "2", "--held-out", "50", "--no-progress",
            "--checkpoint", str(path)]
    assert main(args) == 0
    with pytest.raises(SystemExit, match="whose n_pairs is 6, but 7 was given"):
        main(["train", "recall", "--pairs", "7", "--resume", "--checkpoint", str(path)])


@pytest.mark.slow
def test_docs_training_figures_come_from_the_commands_shown(tmp_path, capsys, monkeypatch):
    """docs/training.md's commands, run as written (in a fresh directory), print its figures:
    the accuracy table, and the explain view's weight on the match and 10,000-query totals."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    cmd = "$ qkv train recall --seed 0 --no-progress"
    explain = "$ qkv train explain --checkpoint recall.safetensors --index 0 --held-out 10000"
    assert cmd in doc and explain in doc
    monkeypatch.chdir(tmp_path)
    assert main(cmd.split()[2:]) == 0  # as written, minus "$ qkv"
    out = capsys.readouterr().out
    row = re.search(r"\| held-out accuracy \| (.*) \|\n", doc).group(1)
    documented = [v.strip("* ") for v in row.split("|")]
    shown = dict(re.findall(r"step (\d+): held-out accuracy (\d\.\d+)", out))
    measured = [shown[s] for s in ("100", "200", "300", "400", "500", "1000")]
    assert measured == documented, (measured, documented)
    run = Run.load(tmp_path / "recall.safetensors")
    assert run.config == RecallConfig(seed=0) and run.step == 1000

    assert main(explain.split()[2:]) == 0
    out = capsys.readouterr().out
    weight = re.search(r"\*\*(0\.\d{4})\*\* on the slot whose key matches", doc).group(1)
    nxt = re.search(r"the next largest (0\.\d{4})", doc).group(1)
    hit = re.search(r"for \*\*(\d\.\d{4})\*\* of queries \(answer accuracy (\d\.\d{4})\)",
                    doc).groups()
    # the kernel's float32 rounding differs by CPU (its BLAS kernels), so the doc gives a bound
    bound = float(re.search(r"kernel's weights to within float32's eps\n\((\S+)\)", doc).group(1))
    assert bound == float(f"{np.finfo(np.float32).eps:.1e}")
    query = re.search(r"query key (k\d+), whose value (v\d+) is stored in pair (\d+)", doc)
    match = re.search(r"│\s+(\d+) │ (k\d+)\s+│ (v\d+)\s+│.*│ (0\.\d{4}) │.*← match", out)
    assert match.groups() == (query.group(3), query.group(1), query.group(2), weight), out
    weights = sorted(float(w) for w in re.findall(r"│ (0\.\d{4}|1\.0000) │", out))
    assert f"{weights[-2]:.4f}" == nxt
    assert f"over 10000 held-out sequences: the largest weight falls on the matching key for " \
           f"{hit[0]} of queries; answer accuracy {hit[1]}" in " ".join(out.split())
    agree = float(re.search(r"max difference (\S+)", out).group(1))
    assert 0 <= agree < bound, (agree, bound)
    assert "held-out example 0" in out and "✓" in out


def test_cli_reports_a_missing_checkpoint_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match=r"no checkpoint at .*qkv train recall --checkpoint"):
        main(["train", "explain", "--checkpoint", str(tmp_path / "none.safetensors")])


def test_explain_index_is_the_same_query_whatever_held_out_is(tmp_path, capsys):
    """`--index i` shows example i from its own generator: --held-out changes only the totals."""
    task = RecallTask(SMALL)
    for i in (0, 3, 17):
        a, b = task.example(i), task.example(i)
        assert a.keys.shape == (1, SMALL.n_pairs + 1)
        np.testing.assert_array_equal(a.keys, b.keys)
        np.testing.assert_array_equal(a.values, b.values)
    assert not np.array_equal(task.example(0).keys, task.example(1).keys)
    with pytest.raises(ValueError, match="index must be an int ≥ 0"):
        task.example(-1)

    path = tmp_path / "r.safetensors"
    assert main(["train", "recall", "--keys", "16", "--values", "16", "--pairs", "6",
                 "--d-model", "16", "--steps", "4", "--eval-every", "4", "--held-out", "50",
                 "--no-progress", "--checkpoint", str(path)]) == 0
    views = {}
    for held in (1, 7, 300):
        capsys.readouterr()
        assert main(["train", "explain", "--checkpoint", str(path), "--index", "5",
                     "--held-out", str(held)]) == 0
        out = capsys.readouterr().out
        example, _, totals = out.partition(f"over {held} held-out sequences")
        assert totals, out
        views[held] = example
    assert views[1] == views[7] == views[300]
    assert "held-out example 5" in views[1]
    shown = RecallTask(Run.load(path).config).example(5)  # the query the view shows
    assert f"query key k{int(shown.keys[0, -1])};" in views[1]
    assert f"stored under it: v{int(shown.target[0])} (pair {int(shown.slot[0])})" in views[1]
    with pytest.raises(SystemExit, match="--index must be ≥ 0"):
        main(["train", "explain", "--checkpoint", str(path), "--index", "-1"])
