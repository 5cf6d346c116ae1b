"""Distributed faults in drope-train (Gloo, 2 ranks on CPU): a rank that dies or hangs makes the others exit
non-zero with one clear message within train.dist_timeout_s instead of hanging, and a worker killed under
torchrun is restarted and resumes from the last checkpoint to the same result as an uninterrupted run."""
import contextlib
import json
import os
import pathlib
import resource
import signal
import subprocess
import sys
import time

import numpy as np
from safetensors.numpy import load_file

from conftest import BIN, expect_error, free_port

CFG = """run: {{name: d, out_dir: {out}, seed: 5}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2, steps: {steps}}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, checkpoint_every: {ckpt}, keep_last: 2, dist_timeout_s: {timeout},
         shard: {shard}}}
"""  # noqa: E501
TRAIN = str(BIN / "drope-train")
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "DROPE_FAULT_NAN_AT_STEP", "DROPE_FAULT_NAN_WEIGHTS_AT_STEP")


def write_cfg(tmp, name, steps=100000, ckpt=0, timeout=4, shard="none"):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / name, steps=steps, ckpt=ckpt, timeout=timeout, shard=shard))
    return p


def base_env():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in DIST_VARS:
        e.pop(k, None)
    return e


def launch_ranks(cfg, world=2, preexec=None):
    """Starts `world` ranks directly (rank 0 hosts the rendezvous store), as srun or a manual launch would;
    `preexec` (rank -> function) runs in that rank's process before it starts."""
    port = free_port()
    procs = []
    for r in range(world):
        env = dict(base_env(), RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([TRAIN, str(cfg), "--quiet"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, preexec_fn=(preexec or {}).get(r)))
    return procs


def wait_for_steps(run_dir, n, procs, limit=120):
    log = run_dir / "log.jsonl"
    deadline = time.time() + limit
    while time.time() < deadline:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
        if log.exists() and log.read_text().count('"loss"') >= n:
            return
        time.sleep(0.01)
    raise AssertionError("training did not start")


def finish(p, limit=120):
    """The process ends by itself (no hang: the limit is far above train.dist_timeout_s)."""
    out, err = p.communicate(timeout=limit)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@contextlib.contextmanager
def ranks_training(tmp, name, timeout):
    """Two ranks launched and past their third step; both are reaped (killed if still alive) afterwards."""
    procs = launch_ranks(write_cfg(tmp, name, timeout=timeout))
    try:
        wait_for_steps(tmp / name, 3, procs)
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def test_dead_rank_makes_the_other_exit_with_a_clear_message(tmp):
    for victim in (1, 0):  # a worker, then the rank that hosts the rendezvous store
        with ranks_training(tmp, f"dead{victim}", timeout=4) as procs:
            procs[victim].send_signal(signal.SIGKILL)
            r = finish(procs[1 - victim])
            expect_error(r, f"rank {1 - victim} of 2:", "failed: another rank died or did not answer within "
                         "train.dist_timeout_s = 4 s")
            assert r.stderr.count("error:") == 1, r.stderr


def test_hung_rank_makes_the_other_exit_after_the_timeout(tmp):
    with ranks_training(tmp, "hung", timeout=3) as procs:
        procs[1].send_signal(signal.SIGSTOP)  # alive but silent: only the timeout can tell
        r = finish(procs[0])
        expect_error(r, "rank 0 of 2:", "failed: another rank died or did not answer within train.dist_timeout_s = 3 s")


def test_a_rank_that_cannot_write_its_checkpoint_shard_is_named(tmp):
    """Rank 1 cannot write its shard of a sharded checkpoint (a file-size limit on rank 1 alone): it names the file
    and the error, rank 0 names rank 1, both exit non-zero and the checkpoint does not appear."""
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

    procs = launch_ranks(write_cfg(tmp, "shard", steps=4, ckpt=2, shard="optimizer"), preexec={1: small_files})
    r0, r1 = (finish(p) for p in procs)
    ckpt = tmp / "shard" / "checkpoints" / "step-00000002"
    expect_error(r1, "[rank 1] error:", "optimizer-00001-of-00002.safetensors: write failed (File too large)")
    expect_error(r0, "step 2: could not save the checkpoint: rank 1 failed while writing its shard of checkpoint "
                 f"{ckpt} (see its log)")
    assert r0.stderr.count("error:") == 1 and r1.stderr.count("error:") == 1, r0.stderr + r1.stderr
    assert not ckpt.exists()


def test_rank_that_never_joins_times_out_at_start(tmp):
    cfg = write_cfg(tmp, "alone", timeout=3)
    env = dict(base_env(), RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    r = subprocess.run([TRAIN, str(cfg), "--quiet"], env=env, capture_output=True, text=True, timeout=120)
    expect_error(r, "rank 0")
    assert "timeout" in r.stderr.lower() or "train.dist_timeout_s" in r.stderr, r.stderr


def test_unreachable_rendezvous_is_one_line_without_a_backtrace(tmp):
    cfg = write_cfg(tmp, "lonely", timeout=2)
    for addr in ("127.0.0.1", "no-such-host.invalid"):
        env = dict(base_env(), RANK="1", WORLD_SIZE="2", MASTER_ADDR=addr, MASTER_PORT=str(free_port()))
        r = subprocess.run([TRAIN, str(cfg), "--quiet"], env=env, capture_output=True, text=True, timeout=120)
        expect_error(r, f"rank 1: cannot reach the rendezvous store at {addr}:")
        assert "frame #" not in r.stderr and "Exception raised from" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def step_losses(run_dir):
    out = {}
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        j = json.loads(line)
        if "loss" in j:
            assert j["step"] not in out, "duplicated log line"
            out[j["step"]] = j["loss"]
    return out


def children(pid):
    out = []
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def test_torchrun_restarts_a_killed_worker_and_resumes(tmp):
    steps = 24
    single = write_cfg(tmp, "single", steps=steps, ckpt=4)
    subprocess.run([TRAIN, str(single), "--quiet"], check=True, env=base_env(), timeout=240)
    multi = write_cfg(tmp, "multi", steps=steps, ckpt=4)
    run_dir = tmp / "multi"
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    p = subprocess.Popen([str(torchrun), "--no-python", "--nproc_per_node=2", "--max-restarts=1",
                          f"--master_port={free_port()}", TRAIN, str(multi), "--quiet"], env=base_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "checkpoints" / "step-00000008" / "state.json").exists():
        assert p.poll() is None, p.communicate()
        time.sleep(0.01)
    workers = [c for c in children(p.pid) if pathlib.Path(f"/proc/{c}/exe").resolve().name == "drope-train"]
    assert len(workers) == 2, workers
    os.kill(workers[1], signal.SIGKILL)
    _, err = p.communicate(timeout=240)
    assert p.returncode == 0, err[-3000:]
    # The agent saw the killed worker (the survivor exited with our message) and the restart succeeded.
    assert "exitcode: -9" in err and "failed: another rank died" in err, err[-3000:]
    losses, ref = step_losses(run_dir), step_losses(tmp / "single")
    assert sorted(losses) == list(range(1, steps + 1))
    for s in ref:
        assert abs(ref[s] - losses[s]) < 1e-5, (s, ref[s], losses[s])

    def last(d):
        return sorted((d / "checkpoints").glob("step-*"))[-1] / "model.safetensors"

    wa, wb = load_file(str(last(tmp / "single"))), load_file(str(last(run_dir)))
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], atol=2e-5, rtol=0, err_msg=k)
