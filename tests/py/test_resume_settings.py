"""What `drope-train --resume` may change (docs/training.md): a change that would alter the steps already taken
(model, positional scheme, QK-norm, RoPE, max_position, phase, seed, data, optimizer, the learning rate of a past
step, a drop already done) is refused with one line naming the checkpoint's run.yaml and the key, and leaves
config.yaml and the checkpoints untouched; changes that only affect what lies ahead are accepted and recorded;
an optimizer state whose tensors have other shapes than their parameters is refused naming the tensor."""
import os
import shutil
import subprocess

import numpy as np
from safetensors.numpy import load_file, save_file

from conftest import BIN, expect_error

CFG = """run: {{name: rs, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 16, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {schedule}
train: {{steps: 2, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 2, keep_last: 3}}
"""


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    return e


def train(cfg, *args):
    return subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet", *map(str, args)], capture_output=True,
                          text=True, timeout=240, env=env1())


def snapshot(run_dir):
    return {p.relative_to(run_dir).as_posix(): p.read_bytes() for p in sorted(run_dir.rglob("*"))
            if p.is_file() and p.name != ".drope-lock"}


def make_run(tmp, name, schedule="{type: constant, warmup: 1}"):
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(CFG.format(out=tmp / name, schedule=schedule))
    r = train(cfg)
    assert r.returncode == 0, r.stderr
    return cfg, tmp / name


def test_resume_refuses_changes_to_what_was_trained(tmp):
    cfg, run = make_run(tmp, "run")
    before = snapshot(run)
    run_yaml = run / "checkpoints" / "step-00000002" / "run.yaml"
    longer = ["--set", "train.steps=4"]
    (tmp / "other.txt").write_text("another corpus " * 200)
    cases = {
        "model.positional.type=nope": ("model.positional.type", "rope", "nope"),
        "model.qk_norm=qk": ("model.qk_norm", "none", "qk"),
        "model.max_position=64": ("model.max_position", "32", "64"),
        "model.positional.rope_theta=500": ("model.positional.rope_theta", "10000", "500"),
        "model.num_layers=3": ("model.num_layers", "2", "3"),
        "model.init_std=0.01": ("model.init_std",),
        "run.seed=4": ("run.seed", "3", "4"),
        "data.seq_len=8": ("data.seq_len", "16", "8"),
        "data.batch_size=8": ("data.batch_size", "4", "8"),
        "data.shuffle=false": ("data.shuffle",),
        f"data.text={tmp / 'other.txt'}": ("data.text", "other.txt"),
        "optim.weight_decay=0.5": ("optim.weight_decay",),
        "optim.lr=1.0e-3": ("optim.lr", "learning rate of step 1"),
        "schedule.warmup=2": ("schedule.warmup", "learning rate of step 1"),
        "train.clip=0.5": ("train.clip",),
        "train.dtype=bfloat16": ("train.dtype", "float32", "bfloat16"),
    }
    for setting, needles in cases.items():
        r = train(cfg, "--resume", *longer, "--set", setting)
        expect_error(r, str(run_yaml), "resuming would change", *needles)
        assert r.returncode == 1 and r.stderr.count("error:") == 1, r.stderr
        assert snapshot(run) == before, setting  # config.yaml keeps the trained settings; nothing else moves
    # The phase: a DroPE phase (from a copy of the checkpoint) on the same run directory.
    shutil.copytree(run / "checkpoints" / "step-00000002", tmp / "init")
    r = train(cfg, "--resume", *longer, "--set", "run.phase=drope", "--set", f"run.init={tmp / 'init'}")
    expect_error(r, str(run_yaml), "run.phase", "pretrain", "drope")
    assert snapshot(run) == before


def test_resume_accepts_what_only_changes_the_steps_ahead(tmp):
    cfg, run = make_run(tmp, "run")
    ok = train(cfg, "--resume", "--set", "train.steps=4", "--set", "train.log_every=2", "--set", "data.micro_batch=2",
               "--set", "run.name=renamed", "--set", "drope.drop_at_step=3", "--set", "drope.qk_norm=qk",
               "--set", "data.text=/usr/share/common-licenses/../common-licenses/GPL-3",
               "--set", "train.fused_loss=false", "--set", "optim.fused=false")
    assert ok.returncode == 0, ok.stderr
    recorded = (run / "config.yaml").read_text()
    assert "steps: 4" in recorded and "drop_at_step: 3" in recorded and "name: renamed" in recorded
    assert "fused_loss: false" in recorded and "fused: false" in recorded
    # The drop (after step 3) now lies behind the step-4 checkpoint: its settings are fixed from here on.
    r = train(cfg, "--resume", "--set", "train.steps=5", "--set", "run.name=renamed", "--set", "drope.drop_at_step=3",
              "--set", "drope.qk_norm=q")
    expect_error(r, "step-00000004", "run.yaml", "drope.qk_norm", "qk", "dropped within the checkpoint's 4 steps")


def test_resume_refuses_a_stretched_cosine_schedule(tmp):
    cfg, run = make_run(tmp, "cos", schedule="{type: cosine, warmup: 0}")
    before = snapshot(run)
    r = train(cfg, "--resume", "--set", "train.steps=4")
    expect_error(r, "run.yaml", "schedule.steps", "from 2 to 4", "learning rate of step 2")
    assert snapshot(run) == before
    # Keeping the schedule's length, the run goes on past it at the floor.
    r = train(cfg, "--resume", "--set", "train.steps=4", "--set", "schedule.steps=2")
    assert r.returncode == 0, r.stderr


def test_resume_refuses_optimizer_moments_of_another_shape(tmp):
    cfg, run = make_run(tmp, "opt")
    path = run / "checkpoints" / "step-00000002" / "optimizer.safetensors"
    good = path.read_bytes()
    state = load_file(str(path))
    key = "exp_avg.model.layers.0.mlp.down_proj.weight"
    state[key] = np.ascontiguousarray(state[key].T)  # (64, 128) -> (128, 64): same size, another shape
    save_file(state, str(path), metadata={"steps": "2"})
    r = train(cfg, "--resume", "--set", "train.steps=4")
    expect_error(r, str(path), key, "[128, 64]", "[64, 128]")
    state[key] = np.zeros((64 * 128 + 8,), np.float32)
    save_file(state, str(path), metadata={"steps": "2"})
    expect_error(train(cfg, "--resume", "--set", "train.steps=4"), str(path), key, "[8200]")
    path.write_bytes(good)
    assert train(cfg, "--resume", "--set", "train.steps=4").returncode == 0
