"""Crash safety of drope-train: SIGKILL at random moments (during steps, checkpoint writes, pruning and
start-up) with a resume after each kill gives the uninterrupted run's weights and loss log exactly, and no
checkpoint on disk is ever unreadable; SIGTERM finishes the step, saves and exits 0; a failed save (file
size limit, i.e. a full disk) stops cleanly and keeps the previous checkpoint; non-finite steps are
skipped, K in a row abort, and a non-finite model never overwrites a good checkpoint."""
import json
import os
import random
import resource
import signal
import subprocess
import time

import numpy as np
from safetensors.numpy import load_file

from conftest import BIN, expect_error

CFG = """run: {{name: cs, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2}}
train: {{steps: {steps}, log_every: {log_every}, eval_every: 10, eval_batches: 2, checkpoint_every: {ckpt}, keep_last: 2}}
"""  # noqa: E501
TIMING = ("tokens_per_s", "elapsed_s", "mfu")
TRAIN = str(BIN / "drope-train")


def env1(**extra):
    e = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "DROPE_FAULT_NAN_AT_STEP",
              "DROPE_FAULT_NAN_WEIGHTS_AT_STEP"):
        if k not in extra:
            e.pop(k, None)
    return e


def write_cfg(tmp, name, steps, ckpt=3, log_every=1):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / name, steps=steps, ckpt=ckpt, log_every=log_every))
    return p


def train(cfg, *args, env=None, check=True, **kw):
    r = subprocess.run([TRAIN, str(cfg), "--quiet", *args], env=env or env1(), capture_output=True, text=True,
                       timeout=240, **kw)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def log_lines(run_dir):
    """log.jsonl without the timing fields; every line must be valid JSON."""
    out = []
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        j = json.loads(line)
        out.append({k: v for k, v in j.items() if k not in TIMING})
    return out


def checkpoints(run_dir):
    d = run_dir / "checkpoints"
    return sorted(p for p in d.iterdir() if p.name.startswith("step-")) if d.exists() else []


def check_readable(ckpt):
    """A checkpoint directory loads: state, model config, model and optimizer tensors, all finite."""
    state = json.loads((ckpt / "state.json").read_text())
    assert state["step"] == int(ckpt.name.split("-")[1]), ckpt
    assert (ckpt / "drope.yaml").read_text().strip(), ckpt
    for f in ("model.safetensors", "optimizer.safetensors"):
        for k, v in load_file(str(ckpt / f)).items():
            assert np.isfinite(v).all(), (ckpt, f, k)


def final_tensors(run_dir):
    last = checkpoints(run_dir)[-1]
    return {**load_file(str(last / "model.safetensors")),
            **{"opt." + k: v for k, v in load_file(str(last / "optimizer.safetensors")).items()}}


def assert_same_run(ref_dir, run_dir):
    a, b = final_tensors(ref_dir), final_tensors(run_dir)
    assert a.keys() == b.keys()
    for k in a:
        assert np.array_equal(a[k], b[k]), k  # bitwise
    la, lb = log_lines(ref_dir), log_lines(run_dir)
    assert la == lb  # same lines in the same order: nothing lost, duplicated or torn
    assert len({(j["step"], "loss" in j) for j in lb}) == len(lb)


def poll(p, cond, period=0.0005):
    """Polls cond() until it holds (True) or the process exits (False)."""
    while p.poll() is None:
        if cond():
            return True
        time.sleep(period)
    return False


def temp_entries(ckpt_dir):
    try:
        return [n for n in os.listdir(ckpt_dir) if n.startswith(".drope-tmp-")]
    except FileNotFoundError:
        return []


def logged_steps(run_dir):
    try:
        return (run_dir / "log.jsonl").read_text().count('"loss"')
    except FileNotFoundError:
        return 0


def test_sigkill_at_random_moments_then_resume_equals_uninterrupted(tmp):
    steps = 90
    train(write_cfg(tmp, "ref", steps))
    cfg = write_cfg(tmp, "killed", steps)
    run_dir, ckpt_dir = tmp / "killed", tmp / "killed" / "checkpoints"
    rng = random.Random(20240611)
    kills, mid_write, starts = 0, 0, 0
    modes = {}
    while True:
        starts += 1
        assert starts < 200, "no progress"
        p = subprocess.Popen([TRAIN, str(cfg), "--quiet", "--resume"], env=env1(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        if kills >= 24:
            _, err = p.communicate(timeout=240)
            assert p.returncode == 0, err
            break
        mode = rng.choice(["step", "ckpt-write", "ckpt-write", "after-ckpt", "startup"])
        if mode == "step":  # while training: after a random number of further logged steps, plus jitter
            target = rng.randint(1, 4)
            base = None

            def cond(target=target):
                nonlocal base
                n = logged_steps(run_dir)
                if base is None:
                    base = n  # the log was truncated to the resumed checkpoint by now or soon after
                return n >= base + target
            hit = poll(p, cond)
            time.sleep(rng.uniform(0, 0.01))
        elif mode == "ckpt-write":  # while a checkpoint directory is being written
            hit = poll(p, lambda: bool(temp_entries(ckpt_dir)), period=0)  # busy: the window is milliseconds
        elif mode == "after-ckpt":  # right after a new checkpoint appears: keep-last pruning
            before = {c.name for c in checkpoints(run_dir)}
            hit = poll(p, lambda: bool({c.name for c in checkpoints(run_dir)} - before))  # noqa: B023
        else:  # during start-up / resume (loading, log truncation)
            time.sleep(rng.uniform(0, 0.6))
            hit = p.poll() is None
        if not hit or p.poll() is not None:  # finished before the kill landed: start over from scratch
            p.wait()
            assert p.returncode == 0, p.stderr.read()
            break
        p.send_signal(signal.SIGKILL)
        p.wait()
        p.stderr.close()
        kills += 1
        modes[mode] = modes.get(mode, 0) + 1
        if mode == "ckpt-write" and temp_entries(ckpt_dir):
            mid_write += 1
        for c in checkpoints(run_dir):  # whatever the kill interrupted, every checkpoint present loads
            check_readable(c)
    print(f"kills {kills} ({modes}), {mid_write} inside a checkpoint write, {starts} starts")
    assert kills >= 20, f"the run finished after only {kills} kills; make it longer"
    assert mid_write >= 1, "no kill landed inside a checkpoint write"
    assert not temp_entries(ckpt_dir) and not [n for n in os.listdir(run_dir) if n.startswith(".drope-tmp-")]
    assert len(checkpoints(run_dir)) == 2  # keep_last, once the final save has pruned
    for c in checkpoints(run_dir):
        check_readable(c)
    assert_same_run(tmp / "ref", run_dir)
    # Resuming a finished run changes nothing.
    before = (run_dir / "log.jsonl").read_text()
    train(cfg, "--resume")
    assert (run_dir / "log.jsonl").read_text() == before
    assert_same_run(tmp / "ref", run_dir)


def test_fresh_start_refuses_a_run_directory_with_checkpoints(tmp):
    cfg = write_cfg(tmp, "again", 3)
    train(cfg)
    expect_error(train(cfg, check=False), "again", "already holds checkpoints", "--resume")


def test_sigterm_finishes_the_step_saves_and_exits_zero(tmp):
    steps = 40
    train(write_cfg(tmp, "ref", steps, ckpt=0, log_every=3))
    cfg = write_cfg(tmp, "term", steps, ckpt=0, log_every=3)
    run_dir = tmp / "term"
    rng = random.Random(7)
    terms = 0
    while True:
        p = subprocess.Popen([TRAIN, str(cfg), "--quiet", "--resume"], env=env1(), stderr=subprocess.PIPE, text=True)
        if terms == 3:
            assert p.wait(timeout=240) == 0, p.stderr.read()
            break
        base = [None]

        def cond(target=rng.randint(1, 3), base=base):  # noqa: B008 - a new target per try
            n = logged_steps(run_dir)
            if base[0] is None:
                base[0] = n
            return n >= base[0] + target
        assert poll(p, cond), "finished before SIGTERM"
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 0, p.stderr.read()
        terms += 1
        ck = checkpoints(run_dir)
        assert ck, "SIGTERM did not save"
        check_readable(ck[-1])
        state = json.loads((ck[-1] / "state.json").read_text())
        assert max(j["step"] for j in log_lines(run_dir)) <= state["step"]
    # Resumed three times with log_every 3: the log is the uninterrupted one (no extra first-step lines).
    assert_same_run(tmp / "ref", run_dir)


def limit_file_size(nbytes):
    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return f


def test_failed_save_keeps_the_previous_checkpoint(tmp):
    train(write_cfg(tmp, "ref", 12, ckpt=6))
    cfg = write_cfg(tmp, "full", 12, ckpt=6)
    run_dir = tmp / "full"
    p = subprocess.Popen([TRAIN, str(cfg), "--quiet"], env=env1())
    assert poll(p, lambda: (run_dir / "checkpoints" / "step-00000006" / "state.json").exists())
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert [c.name for c in checkpoints(run_dir)] == ["step-00000006"]
    good = {f.name: f.read_bytes() for f in (run_dir / "checkpoints" / "step-00000006").iterdir()}
    # Every file larger than 64 KiB fails to write (EFBIG), as on a full disk: the model weights do.
    r = subprocess.run([TRAIN, str(cfg), "--quiet", "--resume"], env=env1(), capture_output=True, text=True,
                       timeout=240, preexec_fn=limit_file_size(64 << 10))
    expect_error(r, "step 12: could not save the checkpoint", "model.safetensors", "File too large",
                 "step-00000006 is intact", "--resume")
    assert r.returncode == 1
    assert [c.name for c in checkpoints(run_dir)] == ["step-00000006"]
    assert {f.name: f.read_bytes() for f in (run_dir / "checkpoints" / "step-00000006").iterdir()} == good
    assert not temp_entries(run_dir / "checkpoints")
    # Disk space back: the resume from step 6 ends exactly like the uninterrupted run.
    train(cfg, "--resume")
    assert_same_run(tmp / "ref", run_dir)


def test_non_finite_steps_are_skipped_then_abort_after_k(tmp):
    cfg = write_cfg(tmp, "nan", 10)
    r = train(cfg, env=env1(DROPE_TEST_FAULTS="1", DROPE_FAULT_NAN_AT_STEP="4,5"))
    assert r.stderr.count("warning: step ") == 2  # --quiet keeps warnings: steps 4 and 5
    lines = log_lines(tmp / "nan")
    skipped = [j["step"] for j in lines if "skipped" in j]
    assert skipped == [4, 5]
    assert sorted(j["step"] for j in lines if "loss" in j) == [1, 2, 3, 6, 7, 8, 9, 10]
    for c in checkpoints(tmp / "nan"):
        check_readable(c)
    # K = train.max_bad_steps non-finite steps in a row abort; the last good checkpoint is named and kept.
    cfg = write_cfg(tmp, "abort", 20)
    r = subprocess.run([TRAIN, str(cfg), "--set", "train.max_bad_steps=3"], capture_output=True, text=True,
                       env=env1(DROPE_TEST_FAULTS="1", DROPE_FAULT_NAN_AT_STEP="5,7,8,9"), timeout=240)
    expect_error(r, "aborting at step 9: 3 non-finite steps in a row", "train.max_bad_steps = 3", "step-00000006")
    assert "warning: step 5: non-finite" in r.stderr
    assert [c.name for c in checkpoints(tmp / "abort")] == ["step-00000003", "step-00000006"]
    for c in checkpoints(tmp / "abort"):
        check_readable(c)
    expect_error(train(cfg, "--set", "train.max_bad_steps=0", check=False), "train.max_bad_steps must be >= 1")


def test_non_finite_weights_never_overwrite_a_good_checkpoint(tmp):
    cfg = write_cfg(tmp, "poison", 20)
    r = subprocess.run([TRAIN, str(cfg), "--quiet", "--set", "train.max_bad_steps=100"], capture_output=True,
                       text=True, env=env1(DROPE_TEST_FAULTS="1", DROPE_FAULT_NAN_WEIGHTS_AT_STEP="4"), timeout=240)
    expect_error(r, "step 6: could not save the checkpoint", "refusing to write checkpoint", "non-finite weights",
                 "step-00000003 is intact")
    assert [c.name for c in checkpoints(tmp / "poison")] == ["step-00000003"]
    check_readable(checkpoints(tmp / "poison")[0])


def test_absurd_sizes_in_a_run_config_are_rejected_before_allocating(tmp):
    cfg = write_cfg(tmp, "big", 3)
    expect_error(train(cfg, "--set", "data.seq_len=1000000000000", check=False), "big.yaml", "data.seq_len", "2^24")
    expect_error(train(cfg, "--set", "model.vocab_size=1000000000000", check=False), "model.vocab_size",
                 "implausibly large")
