"""Checkpoint integrity: every checkpoint's state.json records a run id (new at a run's first step, kept by every
checkpoint of the run, a new one with a parent for a run started from another run's checkpoint) and a digest of
every tensor and file beside it; resume and every --model load verify them. Damaged files (bit flips in a model
and an optimizer tensor, a flipped exponent that stays finite, truncations), a tensor swapped in from another
step, and another run's model / optimizer / whole checkpoint copied in are refused naming the file and the
tensor; --allow-foreign-checkpoint accepts grafted weights with warnings; checkpoints of older builds (no
digests) load with one warning."""
import json
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import BIN, expect_error, expect_model_dir_error, run_cli

CFG = """run: {{name: integrity, out_dir: {out}, seed: {seed}}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: constant}}
train: {{steps: 4, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 2, keep_last: 3, shard: {shard}}}
"""
TENSOR = "model.layers.0.mlp.up_proj.weight"
MOMENT = "exp_avg_sq.model.layers.0.self_attn.q_proj.weight"


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    return e


def train(cfg, *args):
    return subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet", *map(str, args)], capture_output=True,
                          text=True, timeout=240, env=env1())


def refused(r, *needles):
    """One clear refusal: exit status 1, one 'error:' line naming every needle."""
    expect_error(r, *needles)
    assert r.returncode == 1, r.stderr
    assert r.stderr.count("error:") == 1, r.stderr


def make_run(root, name, seed=3, shard="none"):
    cfg = root / f"{name}.yaml"
    cfg.write_text(CFG.format(out=root / name, seed=seed, shard=shard))
    r = train(cfg)
    assert r.returncode == 0, r.stderr
    return cfg, root / name / "checkpoints"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two finished runs of the same config with different seeds (checkpoints at steps 2 and 4), trained once."""
    root = tmp_path_factory.mktemp("runs")
    return {"a": make_run(root, "a"), "b": make_run(root, "b", seed=4)}


@pytest.fixture
def run_a(runs, tmp):
    """A private copy of run a: (config, checkpoints directory), the config pointing at the copy."""
    cfg, ck = runs["a"]
    shutil.copytree(ck.parent, tmp / "a")
    mine = tmp / "a.yaml"
    mine.write_text(cfg.read_text().replace(str(ck.parent), str(tmp / "a")))
    return mine, tmp / "a" / "checkpoints"


def state(ckpt):
    return json.loads((ckpt / "state.json").read_text())


def header(path):
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), 8 + n


def flip_bit(path, tensor, element, bit):
    """Flips bit `bit` of float32 element `element` of `tensor` in place; returns the old and new values."""
    h, start = header(path)
    begin = start + h[tensor]["data_offsets"][0] + 4 * element
    raw = bytearray(path.read_bytes())
    old = struct.unpack("<f", raw[begin:begin + 4])[0]
    v = struct.unpack("<I", raw[begin:begin + 4])[0] ^ (1 << bit)
    raw[begin:begin + 4] = struct.pack("<I", v)
    path.write_bytes(bytes(raw))
    return old, struct.unpack("<f", raw[begin:begin + 4])[0]


def metadata(path):
    return header(path)[0].get("__metadata__", {})


def resume(cfg, *args):
    return train(cfg, "--resume", "--set", "train.steps=6", *args)


# ---------------------------------------------------------------------------------------------------
# What a checkpoint records


def test_checkpoints_record_the_run_and_a_digest_of_every_tensor(runs, tmp):
    cfg, ck = runs["a"]
    s2, s4 = state(ck / "step-00000002"), state(ck / "step-00000004")
    assert s4["format"] == "drope-checkpoint-2"
    assert re.fullmatch(r"[0-9a-f]{32}", s4["run"]["id"]) and s4["run"]["parent"] is None
    assert s2["run"]["id"] == s4["run"]["id"] != state(runs["b"][1] / "step-00000004")["run"]["id"]
    files = s4["digests"]["files"]
    assert s4["digests"]["algorithm"] == "crc32c"
    assert sorted(files) == sorted(p.name for p in (ck / "step-00000004").iterdir() if p.name != "state.json")
    assert set(files["model.safetensors"]) == set(load_file(str(ck / "step-00000004" / "model.safetensors")))
    assert set(files["optimizer.safetensors"]) == set(load_file(str(ck / "step-00000004" / "optimizer.safetensors")))
    assert re.fullmatch(r"[0-9a-f]{8}", files["run.yaml"])
    for f in ("model.safetensors", "optimizer.safetensors"):
        m = metadata(ck / "step-00000004" / f)
        assert m["drope.run"] == s4["run"]["id"] and m["drope.step"] == "4", m
    # A run started from this checkpoint has a new id and this run as its parent.
    child = tmp / "child.yaml"
    child.write_text(cfg.read_text().replace(str(ck.parent), str(tmp / "child")).replace(
        "run: {", f"run: {{init: {ck / 'step-00000004'}, phase: finetune, ").replace(
        "train:", "scaling: {type: pi, factor: 2}\ntrain:"))
    r = train(child, "--set", "train.steps=2")
    assert r.returncode == 0, r.stderr
    c = state(tmp / "child" / "checkpoints" / "step-00000002")
    assert c["run"]["id"] != s4["run"]["id"]
    assert c["run"]["parent"] == {"id": s4["run"]["id"], "step": 4, "checkpoint": str(ck / "step-00000004")}


def test_resume_keeps_the_run_id(run_a):
    cfg, ck = run_a
    rid = state(ck / "step-00000004")["run"]["id"]
    r = resume(cfg)
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert state(ck / "step-00000006")["run"]["id"] == rid


# ---------------------------------------------------------------------------------------------------
# Damage: bit flips and truncations


def test_a_flipped_bit_in_a_model_tensor_is_refused_by_resume_and_every_load(run_a, tmp):
    cfg, ck = run_a
    last = ck / "step-00000004"
    before = [p.name for p in ck.iterdir()]
    flip_bit(last / "model.safetensors", TENSOR, 5, 3)  # a low mantissa bit: the value barely moves
    refused(resume(cfg), str(last / "model.safetensors"), TENSOR, "does not match its digest")
    assert sorted(p.name for p in ck.iterdir()) == sorted(before)  # nothing written
    expect_model_dir_error(last, tmp, "model.safetensors", TENSOR, "does not match its digest")


@pytest.mark.parametrize("where", ["model", "optimizer"])
def test_a_flipped_exponent_that_stays_finite_is_refused(run_a, where):
    cfg, ck = run_a
    path = ck / "step-00000004" / f"{where}.safetensors"
    name = TENSOR if where == "model" else "exp_avg." + TENSOR
    values = load_file(str(path))[name].reshape(-1)
    i = int(np.argmax((np.abs(values) > 1e-20) & (np.abs(values) < 1)))  # exponent < 127: bit 30 is clear
    old, new = flip_bit(path, name, i, 30)
    assert np.isfinite(new) and abs(new) > 1e30 * abs(old), (old, new)
    refused(resume(cfg), str(path), name, "does not match its digest")


def test_a_flipped_bit_in_an_optimizer_tensor_is_refused(run_a):
    cfg, ck = run_a
    path = ck / "step-00000004" / "optimizer.safetensors"
    flip_bit(path, MOMENT, 0, 1)
    refused(resume(cfg), str(path), MOMENT, "does not match its digest")


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "state.json", "drope.yaml",
                                  "run.yaml", "config.json"])
def test_truncated_files_are_refused(run_a, name):
    cfg, ck = run_a
    path = ck / "step-00000004" / name
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2] if name != "run.yaml" else data[:data.rindex(b"\n", 0, -1) + 1])
    r = resume(cfg)
    expect_error(r, str(ck / "step-00000004"))
    assert r.returncode == 1 and r.stderr.count("error:") == 1, r.stderr


def test_an_edited_state_json_is_refused(run_a):
    cfg, ck = run_a
    p = ck / "step-00000004" / "state.json"
    s = state(ck / "step-00000004")
    s["tokens"] += 1
    p.write_text(json.dumps(s, indent=1))
    refused(resume(cfg), str(p), "state_digest")
    # Spacing and key order are not content.
    s["tokens"] -= 1
    p.write_text(json.dumps(dict(reversed(list(s.items())))))
    assert resume(cfg).returncode == 0


# ---------------------------------------------------------------------------------------------------
# Files of other steps and runs


def test_a_tensor_swapped_in_from_another_step_is_refused(run_a):
    cfg, ck = run_a
    path = ck / "step-00000004" / "model.safetensors"
    meta = metadata(path)
    weights = load_file(str(path))
    weights[TENSOR] = load_file(str(ck / "step-00000002" / "model.safetensors"))[TENSOR]
    save_file(weights, str(path), metadata=meta)  # the run's own metadata: only the digest can tell
    refused(resume(cfg), str(path), TENSOR, "does not match its digest")


def test_a_model_file_of_another_step_is_refused(run_a):
    cfg, ck = run_a
    shutil.copy(ck / "step-00000002" / "model.safetensors", ck / "step-00000004" / "model.safetensors")
    refused(resume(cfg), "model.safetensors", "at step 2", "at step 4", "another checkpoint of this run")


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors"])
def test_files_of_another_run_are_refused(runs, run_a, tmp, name):
    cfg, ck = run_a
    other = runs["b"][1] / "step-00000004"
    shutil.copy(other / name, ck / "step-00000004" / name)
    rid = state(other)["run"]["id"]
    refused(resume(cfg), str(ck / "step-00000004" / name), f"run {rid}", "another run")
    if name == "model.safetensors":
        expect_model_dir_error(ck / "step-00000004", tmp, name, "another run")


def test_a_whole_checkpoint_of_another_run_is_refused(runs, run_a):
    cfg, ck = run_a
    other = runs["b"][1] / "step-00000004"
    s = state(other)
    # Under another step's name its step disagrees with the name; under its own, only the run id tells it apart.
    shutil.copytree(other, ck / "step-00000005")
    refused(resume(cfg), "step-00000005", "disagrees")
    shutil.rmtree(ck / "step-00000005")
    shutil.rmtree(ck / "step-00000004")
    shutil.copytree(other, ck / "step-00000004")
    refused(resume(cfg), "step-00000004", s["run"]["id"], "step-00000002", "another run copied in")


def test_allow_foreign_checkpoint_grafts_with_warnings(runs, run_a):
    cfg, ck = run_a
    graft = runs["b"][1] / "step-00000004" / "model.safetensors"
    shutil.copy(graft, ck / "step-00000004" / "model.safetensors")
    r = resume(cfg, "--allow-foreign-checkpoint")
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "model.safetensors" in r.stderr and "another run" in r.stderr, r.stderr
    assert "error" not in r.stderr, r.stderr
    # The run goes on as itself from the grafted weights, and its new checkpoint verifies.
    assert state(ck / "step-00000006")["run"]["id"] == state(ck / "step-00000004")["run"]["id"]
    r = train(cfg, "--resume", "--set", "train.steps=8")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------------
# Older builds' checkpoints and sharded runs


def as_older_build(d, stamps=False):
    """Rewrites checkpoint `d` as an older build wrote it: state.json without run identity or digests, and (unless
    `stamps`) safetensors files without the run stamp in their metadata."""
    s = state(d)
    old = {k: s[k] for k in ("step", "tokens", "phase_start", "skipped_steps", "extra")}
    old["format"] = "drope-checkpoint-1"
    (d / "state.json").write_text(json.dumps(old))
    for f in d.glob("*.safetensors"):
        if not stamps:
            meta = {k: v for k, v in metadata(f).items() if not k.startswith("drope.")}
            save_file(load_file(f), f, metadata=meta)


def test_a_checkpoint_of_an_older_build_loads_with_one_warning(run_a, tmp):
    cfg, ck = run_a
    for d in ck.iterdir():
        as_older_build(d)
    tj = tmp / "t.json"
    tj.write_text("[[1, 2, 3]]")
    r = run_cli("drope-eval", "logits", "--model", ck / "step-00000004", "--tokens", tj, "--out", tmp / "l.safetensors")
    assert r.stderr.count("warning:") == 1 and "not verified" in r.stderr, r.stderr
    r = resume(cfg)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("warning:") == 1 and "not verified" in r.stderr, r.stderr
    assert re.fullmatch(r"[0-9a-f]{32}", state(ck / "step-00000006")["run"]["id"])


def test_sharded_checkpoints_are_verified(tmp):
    cfg, ck = make_run(tmp, "s", shard="optimizer")
    last = ck / "step-00000004"
    s = state(last)
    assert "optimizer-manifest.json" in s["digests"]["files"]
    piece = next(iter(load_file(str(last / "optimizer-00000-of-00001.safetensors"))))
    assert metadata(last / "optimizer-00000-of-00001.safetensors")["drope.run"] == s["run"]["id"]
    flip_bit(last / "optimizer-00000-of-00001.safetensors", piece, 0, 2)
    refused(resume(cfg), "optimizer-00000-of-00001.safetensors", piece, "does not match its digest")


def test_files_the_record_does_not_list_are_refused(runs, tmp):
    """A sharded checkpoint records its manifest and pieces. An optimizer.safetensors copied in beside them is
    what the loader reads first, so it must be in the record too: a file the loaders read that state.json does not
    list is refused by name (a warning with --allow-foreign-checkpoint), whatever its content."""
    cfg, ck = make_run(tmp, "s", shard="optimizer")
    last = ck / "step-00000004"
    foreign = last / "optimizer.safetensors"
    shutil.copy(runs["b"][1] / "step-00000004" / "optimizer.safetensors", foreign)
    before = sorted(p.name for p in ck.parent.rglob("*"))
    refused(resume(cfg), str(foreign), "not recorded", str(last / "state.json"))
    assert sorted(p.name for p in ck.parent.rglob("*")) == before  # nothing written
    r = resume(cfg, "--allow-foreign-checkpoint")
    assert r.returncode == 0 and "warning:" in r.stderr and str(foreign) in r.stderr, r.stderr
    # A model file beside a checkpoint's model is refused by every load, not only by resume.
    (last / "model.safetensors.index.json").write_text('{"weight_map": {"x": "model.safetensors"}}')
    expect_model_dir_error(last, tmp, "model.safetensors.index.json", "not recorded")


def test_a_malformed_optimizer_manifest_is_named(tmp):
    cfg, ck = make_run(tmp, "s", shard="optimizer")
    path = ck / "step-00000004" / "optimizer-manifest.json"
    good = json.loads(path.read_text())
    for key, value in [("format", 5), ("format", None), ("params", [{"name": 7, "numel": 1}]), ("world", "1")]:
        path.write_text(json.dumps(dict(good, **{key: value})))
        refused(resume(cfg), str(path))


def test_a_checkpoints_directory_that_cannot_be_read_stops_resume(run_a, tmp):
    """checkpoints/ as a symlink to a volume that is not mounted: --resume must not take it for a run without
    checkpoints, start again from step 0 and replace the run's log; it stops at once naming the directory. A
    checkpoint entry that cannot be examined (a symlink loop) is named the same way."""
    cfg, ck = run_a
    run_dir = ck.parent
    logs = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    ck.rename(tmp / "elsewhere")
    ck.symlink_to(tmp / "not-mounted" / "checkpoints")
    for args in (["--resume"], []):
        refused(train(cfg, *args, "--set", "train.steps=6"), str(ck), "not a readable directory")
        assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == logs
    ck.unlink()
    (tmp / "elsewhere").rename(ck)
    (ck / "step-00000009").symlink_to("step-00000009")
    refused(resume(cfg), str(ck / "step-00000009"), "Too many levels of symbolic links")
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == logs


def test_a_state_file_rewritten_in_the_older_format_is_refused(run_a, tmp):
    """A state.json without digests (the older format) beside safetensors files that carry a run stamp is refused:
    accepted, it would turn every check off (a flipped exponent in a weight would load with one warning, and resume
    would train on from it)."""
    cfg, ck = run_a
    flip_bit(ck / "step-00000004" / "model.safetensors", TENSOR, 7, 30)
    for d in ck.iterdir():
        as_older_build(d, stamps=True)
    tj = tmp / "t.json"
    tj.write_text("[[1, 2, 3]]")
    refused(run_cli("drope-eval", "logits", "--model", ck / "step-00000004", "--tokens", tj, "--out",
                    tmp / "l.safetensors", check=False),
            "state.json: has no digests, but", "was written by a build that records them")
    assert not (tmp / "l.safetensors").exists()
    refused(resume(cfg), "state.json: has no digests, but", "was written by a build that records them")
    assert not (ck / "step-00000006").exists()
