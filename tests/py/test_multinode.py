"""drope-train under several torchrun agents and under torchrun's elastic restarts, on one machine (Gloo, CPU, a
micro model; docs/training.md#multi-node-and-elastic-runs):

- two agents (`--nnodes 2 --nproc-per-node 1`, a c10d rendezvous at one endpoint) train the same run as one agent
  with two workers (`--standalone --nproc-per-node 2`): the same losses and final weights, for train.shard none
  and params. Both workers have LOCAL_RANK 0; RANK decides who holds the run directory and writes the
  checkpoints and the logs (global rank 0 alone), so the two agents share one run directory without a lock
  conflict, and only one agent's output carries the training lines;
- `torchrun --max-restarts 1 --standalone --nproc-per-node 2 drope-train CFG --resume`: `--resume` starts the
  run when run.out_dir holds no checkpoint; a watcher SIGKILLs global rank 0 once the first checkpoint is
  complete; torchrun restarts the group, the restarted workers resume from the newest checkpoint, and the
  finished run has every step's loss once, equal to an uninterrupted run's (the tolerance of
  test_sharding.py / test_dist_faults.py), and its final weights."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import uuid

import pytest
from test_sharding import same_run as sharding_same_run

from conftest import BIN, free_port

TORCHRUN = pathlib.Path(sys.executable).parent / "torchrun"
TRAIN = BIN / "drope-train"
CFG = """run: {{name: mn, out_dir: {out}, seed: 7}}
model: {{preset: micro, num_layers: 3, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2, steps: {steps}}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, checkpoint_every: {ckpt}, keep_last: 3, clip: 0.5,
         shard: {shard}, dist_timeout_s: 20}}
"""
TOL_LOSS, TOL_W = 1e-5, 2e-5  # test_sharding.same_run's defaults
LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
               "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "DROPE_FAULT_NAN_AT_STEP",
               "DROPE_FAULT_NAN_WEIGHTS_AT_STEP")
# A worker that says who it is (one line per start) and becomes drope-train (same pid).
WRAPPER = """#!/bin/sh
echo "$RANK $LOCAL_RANK $GROUP_RANK $LOCAL_WORLD_SIZE ${TORCHELASTIC_RESTART_COUNT:-0} $$ $PPID" >> "$RANKS_FILE"
exec "$TRAIN" "$@"
"""


def env(tmp):
    e = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    return dict(e, OMP_NUM_THREADS="1", RANKS_FILE=str(tmp / "ranks.txt"), TRAIN=str(TRAIN))


def config(tmp, name, shard="none", steps=12, ckpt=4):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / name, steps=steps, ckpt=ckpt, shard=shard))
    return p


def wrapper(tmp):
    w = tmp / "worker.sh"
    w.write_text(WRAPPER)
    w.chmod(0o755)
    return w


def ranks(tmp):
    """(RANK, LOCAL_RANK, GROUP_RANK, LOCAL_WORLD_SIZE, restart, pid, agent pid) of every worker start."""
    return [tuple(int(x) for x in line.split()) for line in (tmp / "ranks.txt").read_text().splitlines()]


def losses(run_dir):
    out = {}
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        j = json.loads(line)
        if "loss" in j:
            assert j["step"] not in out, f"step {j['step']} logged twice"
            out[j["step"]] = j["loss"]
    return out


def same_run(ref, run):
    """test_sharding.same_run (losses and final weights within its tolerances), every step logged once, and the
    same checkpoints."""
    losses(ref), losses(run)  # each asserts that no step was logged twice
    sharding_same_run(ref, run, tol_loss=TOL_LOSS, tol_w=TOL_W)
    assert sorted(p.name for p in (ref / "checkpoints").iterdir()) == \
        sorted(p.name for p in (run / "checkpoints").iterdir())


def standalone(tmp, cfg, extra=(), max_restarts=0):
    return subprocess.Popen([str(TORCHRUN), "--standalone", "--nproc-per-node", "2", f"--max-restarts={max_restarts}",
                             "--no-python", str(wrapper(tmp)), str(cfg), *extra], env=env(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(p, limit=120):
    out, err = p.communicate(timeout=limit)
    assert p.returncode == 0, (out[-2000:], err[-3000:])
    return out, err


@pytest.mark.parametrize("shard", ["none", "params"])
def test_two_agents_train_as_one_agent_with_two_workers(tmp, shard):
    ref = config(tmp, "one-agent", shard)
    finish(standalone(tmp, ref))
    (tmp / "ranks.txt").unlink()

    cfg = config(tmp, "two-agents", shard)
    run_dir = tmp / "two-agents"
    endpoint, rdzv_id = f"localhost:{free_port()}", f"drope-{uuid.uuid4().hex[:12]}"
    agents = [subprocess.Popen([str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                                "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id, "--no-python", str(wrapper(tmp)),
                                str(cfg)], env=env(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    # While the run lasts, the run directory's lock names the one process that holds it.
    holders = set()
    while any(a.poll() is None for a in agents):
        try:
            text = (run_dir / ".drope-lock").read_text().strip()
        except OSError:
            text = ""
        if text.isascii() and text.isdigit():
            holders.add(int(text))
        time.sleep(0.005)
    outs = [finish(a) for a in agents]

    started = ranks(tmp)
    assert sorted(r[0] for r in started) == [0, 1], started  # RANK: 0 and 1, one worker per agent
    assert all(r[1] == 0 and r[3] == 1 for r in started), started  # LOCAL_RANK 0, LOCAL_WORLD_SIZE 1 on both
    assert sorted(r[2] for r in started) == [0, 1], started  # GROUP_RANK: the agents' node ranks
    rank0 = next(r for r in started if r[0] == 0)
    assert holders == {rank0[5]}, (holders, started)  # global rank 0 alone holds the run directory
    for agent, (out, _) in zip(agents, outs):
        speaks = agent.pid == rank0[6]
        assert ("step " in out and "done: step 12" in out) == speaks, (speaks, out[-2000:])
    log = (run_dir / "drope-train.log").read_text()
    assert log.count("done: step 12") == 1 and log.count("step      1/12") == 1, log
    same_run(tmp / "one-agent", run_dir)


def wait_for(path, procs, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline:
        if path.exists():
            return
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        time.sleep(0.005)
    raise AssertionError(f"{path} did not appear")


def test_elastic_restart_resumes_from_the_last_complete_checkpoint(tmp):
    steps = 120
    reference = config(tmp, "uninterrupted", steps=steps)
    finish(standalone(tmp, reference, ["--resume", "--quiet"]))  # --resume without a checkpoint: a fresh start
    (tmp / "ranks.txt").unlink()

    cfg = config(tmp, "elastic", steps=steps)
    run_dir = tmp / "elastic"
    p = standalone(tmp, cfg, ["--resume"], max_restarts=1)
    wait_for(run_dir / "checkpoints" / "step-00000004" / "state.json", [p])  # complete: state.json comes last
    rank0 = next(r for r in ranks(tmp) if r[0] == 0)
    os.kill(rank0[5], signal.SIGKILL)  # the rank that holds the run directory and writes the checkpoints
    out, err = finish(p, limit=240)

    assert "exitcode: -9" in err, err[-3000:]  # the agent saw the kill and restarted the group
    started = ranks(tmp)
    assert sorted((r[4], r[0]) for r in started) == [(0, 0), (0, 1), (1, 0), (1, 1)], started
    # The restarted rank 0 says where it resumed (on the console: before it opens drope-train.log).
    resumed = [int(line.rsplit("(step ", 1)[1].rstrip(")")) for line in out.splitlines() if "resuming from" in line]
    assert len(resumed) == 1 and resumed[0] >= 4 and resumed[0] % 4 == 0, out[-3000:]
    assert out.count(f"done: step {steps}") == 1, out[-3000:]
    ref, got = losses(tmp / "uninterrupted"), losses(run_dir)
    assert sorted(got) == list(range(1, steps + 1))
    for s in range(resumed[0] + 1, steps + 1):  # the steps trained after the restart
        assert abs(ref[s] - got[s]) < TOL_LOSS, (s, ref[s], got[s])
    same_run(tmp / "uninterrupted", run_dir)
