"""Sharded data parallelism (train.shard) and activation checkpointing under torchrun (Gloo, 2 and 3 ranks):
every shard mode equals one unsharded process, resumes across world sizes and shard modes, survives a rank
killed while writing a checkpoint, and refuses bad input with one clear message."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from conftest import BIN

CFG = """run: {{name: s, out_dir: {out}, seed: 3}}
model: {{preset: micro, num_layers: 3, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: {batch}, micro_batch: {micro}}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2, steps: {steps}}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, checkpoint_every: {ckpt}, keep_last: 5, clip: 0.5,
         shard: {shard}, activation_checkpointing: {ac}}}
"""
TORCHRUN = pathlib.Path(sys.executable).parent / "torchrun"
PORT = [29811]


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def cfg(tmp, name, shard="none", ac="none", micro=0, steps=6, ckpt=0, batch=12):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / name, shard=shard, ac=ac, micro=micro, steps=steps, ckpt=ckpt, batch=batch))
    return p


def train(path, world=1, extra=(), check=True, env=None):
    if world == 1:
        cmd = [str(BIN / "drope-train"), str(path), "--quiet", *extra]
    else:
        PORT[0] += 1
        cmd = [str(TORCHRUN), "--no-python", f"--nproc_per_node={world}", f"--master_port={PORT[0]}",
               str(BIN / "drope-train"), str(path), "--quiet", *extra]
    r = subprocess.run(cmd, env=env or env1(), capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def log(run_dir):
    return [json.loads(l) for l in (run_dir / "log.jsonl").read_text().splitlines()]


def losses(run_dir):
    return {j["step"]: j["loss"] for j in log(run_dir) if "loss" in j}


def weights(run_dir, step=None):
    from safetensors.numpy import load_file

    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    d = ckpts[-1] if step is None else run_dir / "checkpoints" / f"step-{step:08d}"
    return load_file(str(d / "model.safetensors"))


def same_run(a, b, tol_loss=1e-5, tol_w=2e-5):
    la, lb = losses(a), losses(b)
    assert sorted(la) == sorted(lb)
    for s in la:
        assert abs(la[s] - lb[s]) < tol_loss, (s, la[s], lb[s])
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], atol=tol_w, rtol=0, err_msg=k)


# Gradient accumulation steps per rank at 2 ranks -> (global batch, micro-batch): 12 sequences = 6 per rank at
# once, in 2 micro-batches of 3, or 8 sequences = 4 per rank in 4 micro-batches of 1.
ACCUM = {1: (12, 0), 2: (12, 3), 4: (8, 1)}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One unsharded process per accumulation setting, same global batch and micro-batch (so it accumulates
    twice as many micro-batches as each of 2 ranks)."""
    tmp = tmp_path_factory.mktemp("ref")
    out = {}
    for accum, (batch, micro) in ACCUM.items():
        name = f"ref{accum}"
        train(cfg(tmp, name, micro=micro, batch=batch))
        out[accum] = tmp / name
        # the clip must actually clip for the test to mean something
        assert all(j["grad_norm"] > 0.5 for j in log(out[accum]) if "grad_norm" in j)
    return out


@pytest.mark.parametrize("shard", ["optimizer", "grads", "params"])
@pytest.mark.parametrize("accum", [1, 2, 4])
@pytest.mark.parametrize("ac", ["none", "full"])
def test_two_ranks_equal_one_process(tmp, reference, shard, accum, ac):
    batch, micro = ACCUM[accum]
    run = tmp / "multi"
    train(cfg(tmp, "multi", shard=shard, ac=ac, micro=micro, batch=batch), world=2)
    first = next(j for j in log(run) if "loss" in j)
    same_run(reference[accum], run)
    b = first["shard_bytes"]
    assert b["optimizer"] > 0


def test_optimizer_memory_is_one_over_world(tmp):
    one = tmp / "one"
    train(cfg(tmp, "one", shard="optimizer", steps=2))
    two = tmp / "two"
    train(cfg(tmp, "two", shard="optimizer", steps=2), world=2)
    three = tmp / "three"
    train(cfg(tmp, "three", shard="params", steps=2), world=3)
    b1 = next(j for j in log(one) if "loss" in j)["shard_bytes"]
    b2 = next(j for j in log(two) if "loss" in j)["shard_bytes"]
    b3 = next(j for j in log(three) if "loss" in j)["shard_bytes"]
    print("bytes per rank 0: world 1", b1, "world 2", b2, "world 3 params", b3)
    # moments: 1/world of the unsharded run (up to padding to a multiple of the world size per unit)
    assert abs(b2["optimizer"] - b1["optimizer"] / 2) <= 4 * 2 * 2 * 4
    assert abs(b3["optimizer"] - b1["optimizer"] / 3) <= 4 * 2 * 3 * 4
    # params mode: the blocks' weights are stored as 1/world; two whole blocks at most are gathered at a time
    # (the one running and the next, prefetched)
    w = weights(one)
    blocks = sum(v.size for k, v in w.items() if k.startswith("model.layers.")) * 4
    rest = sum(v.size for k, v in w.items() if not k.startswith("model.layers.")) * 4
    block = sum(v.size for k, v in w.items() if k.startswith("model.layers.0.")) * 4
    assert abs(b3["params"] - (blocks / 3 + rest)) <= 3 * 3 * 4 + 4 * 3
    assert 2 * block <= b3["gathered_peak"] <= 2 * block + 2 * 3 * 4
    # 3 blocks, one micro-batch per step: forward gathers blocks 0, 1, 2 and backward 2, 1, 0; all but the
    # first of each step come from the prefetch, and no prefetch goes unused (2 steps, the first log line
    # after step 1)
    assert b3["prefetch_hits"] == 5 and b3["prefetch_wasted"] == 0, b3
    # `drope-train --plan` predicts what the engine holds: moments and weights per rank (up to padding)
    def plan(path, world):
        r = subprocess.run([str(BIN / "drope-train"), str(path), "--plan", "--json", "--world", str(world)],
                           env=env1(), capture_output=True, text=True, check=True)
        return {j["shard"]: j for j in map(json.loads, r.stdout.splitlines())}
    p1 = plan(tmp / "one.yaml", 1)["optimizer"]
    p2 = plan(tmp / "two.yaml", 2)["optimizer"]
    p3 = plan(tmp / "three.yaml", 3)["params"]
    assert p1["optimizer"] == b1["optimizer"] and p2["optimizer"] == b2["optimizer"], (p1, p2)
    assert p3["optimizer"] == b3["optimizer"], p3
    assert p1["params"] == b1["params"] and abs(p2["params"] - b2["params"]) <= 4 * 2 * 8
    assert abs(p3["params"] - b3["params"]) <= 4 * 3, (p3, b3)
    assert p3["params"] < p2["params"]


@pytest.mark.parametrize("first,second", [((2, "params"), (1, "none")), ((1, "grads"), (3, "optimizer")),
                                          ((3, "optimizer"), (2, "params"))])
def test_resume_across_world_sizes_and_shard_modes(tmp, first, second):
    ref = tmp / "ref"
    train(cfg(tmp, "ref", steps=6))
    (w1, s1), (w2, s2) = first, second
    c1 = cfg(tmp, "run", shard=s1, steps=6, ckpt=3)
    r = subprocess.run  # noqa
    # first half: stop after step 3 (train.steps 3 would mark the run complete; cut it with SIGTERM-free
    # means: a separate config whose schedule is the full run's)
    text = c1.read_text().replace("train: {steps: 6,", "train: {steps: 3,")
    half = tmp / "half.yaml"
    half.write_text(text)
    train(half, world=w1)
    assert (tmp / "run" / "checkpoints" / "step-00000003" / "state.json").exists()
    # the first half's final checkpoint is marked complete for 3 steps; resuming with 6 continues it
    c2 = cfg(tmp, "run", shard=s2, steps=6, ckpt=3)
    train(c2, world=w2, extra=["--resume"])
    same_run(ref, tmp / "run", tol_loss=1e-5, tol_w=2e-5)


def test_rank_killed_while_writing_a_checkpoint(tmp):
    c = cfg(tmp, "k", shard="grads", steps=6, ckpt=2)
    env = env1()
    env["DROPE_TEST_FAULTS"] = "1"
    env["DROPE_FAULT_KILL_RANK_IN_CHECKPOINT"] = "1:4"  # rank 1 dies after writing its shard of step 4
    r = train(c, world=2, check=False, env=env)
    assert r.returncode != 0
    ck = tmp / "k" / "checkpoints"
    assert (ck / "step-00000002" / "state.json").exists()
    assert not (ck / "step-00000004").exists()
    # the previous checkpoint is loadable: resume finishes the run equal to an uninterrupted one
    ref = tmp / "ref"
    train(cfg(tmp, "ref", shard="grads", steps=6, ckpt=2), world=2)
    train(c, world=2, extra=["--resume"])
    same_run(ref, tmp / "k", tol_loss=1e-6, tol_w=1e-6)
    assert not [p for p in ck.iterdir() if p.name.startswith(".drope-tmp")]


def fails(r, *needles):
    assert r.returncode != 0
    for bad in ("terminate called", "Segmentation", "core dumped"):
        assert bad not in r.stderr
    for n in needles:
        assert str(n) in r.stderr, r.stderr[-3000:]


def test_bad_inputs(tmp):
    c = cfg(tmp, "bad", shard="params", steps=2, ckpt=0)
    fails(train(c, extra=["--set", "train.shard=zero3"], check=False), "train.shard", "zero3",
          "none, optimizer, grads, params")
    fails(train(c, extra=["--set", "train.activation_checkpointing=half"], check=False),
          "train.activation_checkpointing", "none, full or a positive integer")
    fails(train(c, extra=["--set", "train.activation_checkpointing=0"], check=False), "train.activation_checkpointing")
    fails(train(c, extra=["--set", "drope.drop_at_step=1"], check=False), "drop_at_step", "train.shard none")
    fails(train(c, world=3, extra=["--set", "data.batch_size=8"], check=False), "batch_size 8",
          "not a multiple of the world size 3")
    fails(train(c, world=2, check=False, env=dict(env1(), DROPE_SHARD_PREFETCH="yes")), "DROPE_SHARD_PREFETCH='yes'",
          "expected 0")
    assert not (tmp / "bad" / "checkpoints").exists()
    # a finished sharded run; then damage its manifest / a shard: resume refuses, names the file, keeps everything
    train(c, world=2)
    d = tmp / "bad" / "checkpoints" / "step-00000002"
    before = {p.name: p.read_bytes() for p in d.iterdir()}
    longer = ["--resume", "--set", "train.steps=4", "--set", "schedule.steps=2"]
    manifest = (d / "optimizer-manifest.json").read_bytes()
    m = json.loads(manifest)
    (d / "optimizer-manifest.json").write_text(json.dumps(dict(m, world=3)))
    fails(train(c, world=2, extra=longer, check=False), "optimizer-manifest.json", "shard 0 of 3 is missing")
    (d / "optimizer-manifest.json").write_text(json.dumps(dict(m, params=m["params"][:-1])))
    fails(train(c, world=2, extra=longer, check=False), "optimizer-manifest.json", "parameters")
    (d / "optimizer-manifest.json").write_bytes(manifest)
    shard1 = d / "optimizer-00001-of-00002.safetensors"
    saved = shard1.read_bytes()
    shard1.unlink()
    fails(train(c, world=2, extra=longer, check=False), "shard 1 of 2 is missing")
    shard1.write_bytes(saved)
    after = {p.name: p.read_bytes() for p in d.iterdir()}
    assert before == after
    assert sorted(p.name for p in (tmp / "bad" / "checkpoints").iterdir()) == ["step-00000002"]
