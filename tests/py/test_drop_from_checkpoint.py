"""A DroPE run that drops at step K of its own schedule repeats its RoPE sibling's first K steps (same seed, data
order and schedule). The reproduction therefore starts it from a copy of the RoPE run's step-K checkpoint with
--resume: this checks, with the real drope-train, that both ways give the same weights and the same loss log
after step K, and that the extra checkpoint the RoPE run keeps for it leaves the RoPE run unchanged."""
import json
import os
import shutil
import subprocess

import numpy as np
from safetensors.numpy import load_file

from conftest import BIN

CFG = """run: {{name: drop, out_dir: {out}, seed: 5}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: wsd, warmup: 2, decay_fraction: 0.3}}
drope: {{qk_norm: qk}}
train: {{steps: 12, log_every: 1, eval_every: 0, eval_batches: 2, keep_last: {keep}{extra}}}
"""
TIMING = ("tokens_per_s", "elapsed_s", "mfu")


def train(tmp, name, *args, keep=1, extra=""):
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(CFG.format(out=tmp / name, keep=keep, extra=extra))
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet", *args], env=env, capture_output=True,
                       text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    return tmp / name


def log(run_dir, after=0):
    rows = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows if row.get("step", 0) > after]


def weights(run_dir, step=12):
    return load_file(str(run_dir / "checkpoints" / f"step-{step:08d}" / "model.safetensors"))


def test_drope_from_the_rope_checkpoint_equals_drope_from_scratch(tmp_path):
    k = 9
    plain = train(tmp_path, "rope-plain")
    rope = train(tmp_path, "rope", keep=2, extra=f", checkpoint_every: {k}")
    a, b = weights(plain), weights(rope)
    assert a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a)  # the kept checkpoint changes nothing
    assert log(plain) == log(rope)

    scratch = train(tmp_path, "drope-scratch", "--set", f"drope.drop_at_step={k}")
    seeded = tmp_path / "drope-seeded"
    shutil.copytree(rope / "checkpoints" / f"step-{k:08d}", seeded / "checkpoints" / f"step-{k:08d}")
    train(tmp_path, "drope-seeded", "--set", f"drope.drop_at_step={k}", "--resume")

    a, b, r = weights(scratch), weights(seeded), weights(rope)
    assert a.keys() == b.keys() and all(np.array_equal(a[n], b[n]) for n in a)
    assert a.keys() != r.keys()  # the drop happened: QK-norm weights, no RoPE model
    assert log(seeded) == log(scratch, after=k) and log(seeded)[0]["step"] == k + 1
    assert log(scratch, after=0)[:k] == log(rope)[:k]  # the premise: the same first K steps
