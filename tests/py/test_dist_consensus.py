"""Ranks that disagree (Gloo, 2 CPU ranks launched by hand, as srun would): before the first step every rank's
resolved config, world size, start, dataset and binary are compared through the rendezvous store; a difference
ends every rank with one line naming the key and both values, and a rank that never arrives ends the other within
train.dist_timeout_s naming it. Never a C++ abort, never divergent replicas that both exit 0."""
import os
import subprocess
import time

import pytest

from conftest import BIN, free_port

CFG = """run: {{name: c, out_dir: {out}, seed: {seed}}}
model: {{preset: micro, max_position: 32, hidden_size: {hidden}}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: {seq}, batch_size: 8}}
optim: {{lr: {lr}}}
schedule: {{type: cosine, warmup: 2}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, dist_timeout_s: {timeout}, shard: {shard}}}
"""
BASE = {"seed": 5, "hidden": 64, "seq": 32, "lr": "3.0e-3", "steps": 4, "timeout": 20, "shard": "none"}
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")
TRAIN = str(BIN / "drope-train")
BAD = "terminate called", "EnforceNotMet", "Traceback", "Aborted", "Segmentation"


def cfg_file(tmp, name, **over):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / "run", **{**BASE, **over}))
    return p


def env_for(rank, world, port):
    e = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    e.update(OMP_NUM_THREADS="1", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return e


def launch(cfgs, worlds=None, extra=None):
    port = free_port()
    worlds = worlds or [len(cfgs)] * len(cfgs)
    procs = []
    for r, (cfg, w) in enumerate(zip(cfgs, worlds)):
        args = [TRAIN, str(cfg), "--quiet", *((extra or {}).get(r, []))]
        procs.append(subprocess.Popen(args, env=env_for(r, w, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    for p in procs:
        try:
            _, e = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            _, e = p.communicate()
            raise AssertionError(f"rank hung:\n{e}") from None
        out.append((p.returncode, e))
    return out


@pytest.mark.parametrize("key,over,value0,value1", [
    ("run.seed", {"seed": 6}, "5", "6"),
    ("optim.lr", {"lr": "1.0e-3"}, "0.0030000000000000001", "0.001"),  # as the resolved config writes it
    ("data.seq_len", {"seq": 16}, "32", "16"),
    ("schedule.steps", {"steps": 6}, "4", "6"),  # schedule.steps follows train.steps and comes first
    ("model.hidden_size", {"hidden": 32}, "64", "32"),
    ("train.shard", {"shard": "optimizer"}, "none", "optimizer"),
])
def test_a_differing_setting_is_refused_on_every_rank(tmp, key, over, value0, value1):
    t0 = time.monotonic()
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "b", **over)])
    assert time.monotonic() - t0 < 60
    for rc, err in res:
        assert rc != 0, err
        assert not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "ranks disagree before the first step" in err and key in err, err
        assert f"'{value0}' on rank 0" in err and f"'{value1}' on rank 1" in err, err
    assert not (tmp / "run" / "checkpoints").exists()


def test_a_differing_start_is_refused(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")], extra={1: ["--resume"]})
    for rc, err in res:
        assert rc != 0 and "--resume" in err and "'not given' on rank 0" in err, err


def test_a_differing_world_size_is_refused(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")], worlds=[2, 3])
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD), err
    assert "world size is '2' on rank 0 but '3' on rank 1" in res[0][1], res[0][1]


def test_a_rank_that_never_arrives_is_named(tmp):
    """Rank 1 is never started: rank 0 ends within train.dist_timeout_s naming it."""
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.run([TRAIN, str(cfg_file(tmp, "a", timeout=3)), "--quiet"], env=env_for(0, 2, port),
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode != 0 and "rank 1 did not arrive within train.dist_timeout_s = 3 s" in p.stderr, p.stderr
    assert took < 30, took


def test_agreeing_ranks_train(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")])
    assert all(rc == 0 for rc, _ in res), res
    assert (tmp / "run" / "checkpoints" / "step-00000004").is_dir()
