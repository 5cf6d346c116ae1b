"""`drope-train --plan` against what runs really hold: with DROPE_TRACK_TENSOR_MEMORY=1 the
trainer counts the bytes of live CPU tensors (LibTorch's allocator wrapped) and rank 0 logs their peak; the
plan's total for the configured shard mode must be within 15 % of it, at world 1 and under torchrun at world
2, with and without activation checkpointing. Also: the tracker's environment value is validated."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

BIN = pathlib.Path(os.environ.get("DROPE_BIN", "build"))
TORCHRUN = pathlib.Path(sys.executable).parent / "torchrun"
CFG = """run: {{name: m, out_dir: {out}, seed: 0}}
model: {{preset: {preset}, max_position: {seq}}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: {seq}, batch_size: {batch}, micro_batch: {micro}}}
optim: {{lr: 1.0e-4}}
train: {{steps: 2, log_every: 1, eval_batches: 1, checkpoint_every: 0, shard: {shard},
         activation_checkpointing: {ac}}}
"""
PORT = [29871]


def env():
    e = dict(os.environ, OMP_NUM_THREADS="1", DROPE_TRACK_TENSOR_MEMORY="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


@pytest.mark.parametrize("preset,seq,micro,world,shard,ac", [
    ("tiny-256", 512, 4, 1, "none", "none"),
    ("tiny-256", 512, 4, 1, "none", "full"),
    ("tiny-256", 512, 4, 1, "none", "2"),
    ("micro", 256, 8, 2, "optimizer", "none"),
    ("tiny-256", 256, 4, 2, "grads", "2"),
    ("tiny-256", 256, 4, 2, "params", "full"),
])
def test_plan_matches_tensor_peak(tmp_path, preset, seq, micro, world, shard, ac):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG.format(out=tmp_path / "run", preset=preset, seq=seq, batch=micro * world, micro=micro,
                              shard=shard,
                              ac=ac))
    plan = subprocess.run([str(BIN / "drope-train"), str(cfg), "--plan", "--json", "--world", str(world)], env=env(),
                          capture_output=True, text=True, check=True).stdout
    total = {j["shard"]: j for j in map(json.loads, plan.splitlines())}[shard]["total"]
    cmd = [str(BIN / "drope-train"), str(cfg), "--quiet"]
    if world > 1:
        PORT[0] += 1
        cmd = [str(TORCHRUN), "--no-python", f"--nproc_per_node={world}", f"--master_port={PORT[0]}", *cmd]
    r = subprocess.run(cmd, env=env(), capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [json.loads(l) for l in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    peaks = [j["tensor_bytes"]["peak"] for j in lines if "tensor_bytes" in j]
    assert len(peaks) == 2, lines  # both steps logged the counters
    peak = max(peaks)
    assert abs(total / peak - 1) < 0.15, (total, peak, total / peak - 1)


def test_tracker_value_is_validated(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CFG.format(out=tmp_path / "run", preset="micro", seq=32, batch=1, micro=1, shard="none", ac="none"))
    r = subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet"], env=dict(env(), DROPE_TRACK_TENSOR_MEMORY="on"),
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "DROPE_TRACK_TENSOR_MEMORY" in r.stderr and "0 or 1" in r.stderr
    assert not (tmp_path / "run").exists()


def test_flags_and_settings_that_would_be_ignored_are_refused(tmp_path):
    def run(args, **fields):
        f = dict(out=tmp_path / "run", preset="micro", seq=32, batch=4, micro=2, shard="none", ac="none")
        f.update(fields)
        cfg = tmp_path / "c.yaml"
        cfg.write_text(CFG.format(**f))
        return subprocess.run([str(BIN / "drope-train"), str(cfg), *args], env=env(), capture_output=True, text=True,
                              timeout=240)

    def refused(r, *needles):
        assert r.returncode == 1, r.stdout
        assert r.stderr.count("error:") == 1 and r.stdout == "", r.stderr
        for n in needles:
            assert n in r.stderr, r.stderr

    # Plan flags without --plan, however they are spelled.
    for args in (["--gpu-mem-gb", "10"], ["--world", "0"], ["--world", "-3"], ["--world", "2"], ["--json"]):
        refused(run(["--quiet", *args]), "go with --plan")
    # --plan with a world that cannot be.
    for w in ("0", "-1"):
        refused(run(["--plan", "--world", w]), "--world", "expected an integer in [1,")
    # A micro-batch that, times the world, exceeds the batch.
    refused(run(["--plan", "--world", "4"], batch=4, micro=2), "data.batch_size 4", "micro_batch (2) x world size (4)")
    # A batch the world cannot split (the trainer's check, train::micro_batch_size).
    refused(run(["--plan", "--world", "3"], batch=4, micro=1), "data.batch_size 4",
            "not a multiple of the world size 3")
    # Activation checkpointing of every 3rd block in a 2-layer model recomputes none.
    refused(run(["--plan"], ac="3"), "train.activation_checkpointing 3", "2 layers")
    refused(run(["--quiet"], ac="3"), "train.activation_checkpointing 3", "2 layers")
    assert run(["--plan"], ac="2").returncode == 0
    assert not (tmp_path / "run" / "log.jsonl").exists()
