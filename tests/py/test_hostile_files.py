"""Hostile files at the CLI level: a write beyond the file-size limit (ulimit -f) is a clear error naming the
file, with no partial output, in every tool; our tools never delete or replace what they did not create
(a user's *.tmp-* files, a non-empty directory that is not a drope output) but do clean their own stale
temporaries; a checkpoint whose step disagrees with its directory or its optimizer, or whose optimizer
moments are NaN/negative, is refused by name; a crafted SentencePiece .model is refused, not a crash."""
import json
import os
import resource
import shutil
import struct
import subprocess

import numpy as np
from safetensors.numpy import load_file, save_file

from conftest import BIN, expect_error, run_cli

TRAIN_CFG = """run: {{name: hf, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: constant}}
train: {{steps: 4, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 2, keep_last: 3}}
"""


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def run_limited(args, nbytes):
    """Runs one of our binaries with RLIMIT_FSIZE = nbytes (ulimit -f)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return subprocess.run([str(BIN / args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=240,
                          env=env1(), preexec_fn=limit)


def clean_error(r, *needles):
    """A clean refusal: exit status 1 (not a signal), one 'error:' line naming every needle."""
    expect_error(r, *needles)
    assert r.returncode == 1, f"exit status {r.returncode} (a signal?)\n{r.stderr}"
    assert r.stderr.count("error:") == 1, r.stderr


def our_temps(d):
    return [n for n in os.listdir(d) if n.startswith(".drope-tmp-")]


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def train(cfg, *args):
    return subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet", *args], capture_output=True, text=True,
                          timeout=240, env=env1())


# ---------------------------------------------------------------------------------------------------
# SIGXFSZ: every tool reports the write error


def test_file_size_limit_is_a_write_error_in_every_tool(tmp):
    # drope-model: the weights exceed 16 KiB.
    out = tmp / "m"
    r = run_limited(["drope-model", "init", "--preset", "micro", "--out", out], 16 << 10)
    clean_error(r, "model.safetensors", "File too large")
    assert not out.exists() and not our_temps(tmp)
    # drope-data (its own main, torch-free): the trained tokenizer exceeds 1 KiB.
    r = run_limited(["drope-data", "prepare", "-i", "/usr/share/common-licenses/GPL-3", "--paragraphs", "--out",
                     tmp / "ds",
                     "--train-tokenizer", "--vocab-size", 1000], 1 << 10)
    clean_error(r, str(tmp / "ds" / "tokenizer.model"), "File too large")
    assert not (tmp / "ds").exists() and not our_temps(tmp)
    # drope-analyze: the figure files exceed 512 bytes.
    r = run_limited(["drope-analyze", "rope-scaling", "--out", tmp / "fig"], 512)
    clean_error(r, "fig", "File too large")
    # drope-eval: the logits file exceeds 1 KiB.
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "small")
    (tmp / "tokens.json").write_text(json.dumps([list(range(16))]))
    r = run_limited(["drope-eval", "logits", "--model", tmp / "small", "--tokens", tmp / "tokens.json", "--out",
                     tmp / "logits.safetensors"], 1 << 10)
    clean_error(r, "logits.safetensors", "File too large")
    assert not (tmp / "logits.safetensors").exists() and not our_temps(tmp)


# ---------------------------------------------------------------------------------------------------
# Never delete what we did not create


def test_model_init_refuses_a_foreign_directory_unless_forced(tmp):
    user = tmp / "photos"
    user.mkdir()
    (user / "holiday.jpg").write_bytes(b"\xff\xd8 precious")
    r = run_cli("drope-model", "init", "--preset", "micro", "--out", user, check=False)
    clean_error(r, str(user), "refusing", "--force")
    assert (user / "holiday.jpg").read_bytes() == b"\xff\xd8 precious"
    assert sorted(os.listdir(user)) == ["holiday.jpg"]
    # Our own model directory is replaced as before; an empty directory is filled.
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "model")
    run_cli("drope-model", "init", "--preset", "micro", "--seed", 1, "--out", tmp / "model")
    (tmp / "empty").mkdir()
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "empty")
    assert (tmp / "empty" / "drope.yaml").exists()
    # The same for convert and drop; --force replaces the foreign directory.
    r = run_cli("drope-model", "drop", "--model", tmp / "model", "--out", user, check=False)
    clean_error(r, str(user), "refusing")
    run_cli("drope-model", "convert", "--model", tmp / "model", "--out", user, "--force")
    assert (user / "drope.yaml").exists() and not (user / "holiday.jpg").exists()


def test_only_our_stale_temporaries_are_removed(tmp):
    gone = dead_pid()
    run_dir = tmp / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    user_files = [run_dir / "notes.tmp-1-2", run_dir / "data.tmp-123-abc", run_dir / "checkpoints" / "mine.tmp-9",
                  run_dir / f".drope-tmp-{os.getpid()}-1.live", run_dir / f".drope-tmp-{gone}-xyz.notours"]
    for f in user_files:
        f.write_text("user data")
    (run_dir / "checkpoints" / "step-00000002.tmp-4-5").mkdir()
    (run_dir / "checkpoints" / "step-00000002.tmp-4-5" / "keep.txt").write_text("user data")
    stale = [run_dir / f".drope-tmp-{gone}-deadbeef.config.yaml",
             run_dir / "checkpoints" / f".drope-tmp-{gone}-1.step-00000002"]
    stale[0].write_text("half")
    stale[1].mkdir()
    (stale[1] / "model.safetensors").write_text("half")
    cfg = tmp / "run.yaml"
    cfg.write_text(TRAIN_CFG.format(out=run_dir))
    r = train(cfg)  # a directory holding files we did not create: only with --force
    assert r.returncode == 1 and "--force" in r.stderr, r.stderr
    r = train(cfg, "--force")
    assert r.returncode == 0, r.stderr
    for f in user_files:
        assert f.read_text() == "user data", f
    assert (run_dir / "checkpoints" / "step-00000002.tmp-4-5" / "keep.txt").exists()
    for s in stale:
        assert not s.exists(), s
    # Another tool (drope-model) cleans stale temporaries where it writes, and only those.
    (tmp / "models").mkdir()
    old = tmp / "models" / f".drope-tmp-{gone}-0a.m"
    old.mkdir()
    (tmp / "models" / "m.tmp-77-1").write_text("user data")
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "models" / "m")
    assert not old.exists()
    assert (tmp / "models" / "m.tmp-77-1").read_text() == "user data"


# ---------------------------------------------------------------------------------------------------
# Checkpoint consistency


def set_metadata(path, **meta):
    """Rewrites a safetensors file's __metadata__ keys, keeping the tensor bytes."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header.setdefault("__metadata__", {}).update(meta)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    path.write_bytes(struct.pack("<Q", len(h)) + h + raw[8 + n:])


def trained_run(tmp):
    run_dir = tmp / "run"
    cfg = tmp / "run.yaml"
    cfg.write_text(TRAIN_CFG.format(out=run_dir))
    r = train(cfg)
    assert r.returncode == 0, r.stderr
    return cfg, run_dir / "checkpoints"


def test_inconsistent_checkpoints_are_refused(tmp):
    cfg, ck = trained_run(tmp)
    last = ck / "step-00000004"
    # A copy under another step's name: state.json says 4.
    shutil.copytree(last, ck / "step-00000009")
    clean_error(train(cfg, "--resume"), "step-00000009", "state.json", "disagrees")
    # state.json agrees with the name but the optimizer took 4 steps.
    st = json.loads((ck / "step-00000009" / "state.json").read_text())
    st["step"] = 9
    (ck / "step-00000009" / "state.json").write_text(json.dumps(st))
    clean_error(train(cfg, "--resume"), "step-00000009", "optimizer has taken 4 steps", "step 9")
    shutil.rmtree(ck / "step-00000009")
    # Step counts are parsed strictly.
    set_metadata(last / "optimizer.safetensors", steps="4abc")
    clean_error(train(cfg, "--resume"), "optimizer.safetensors", "'4abc'")
    set_metadata(last / "optimizer.safetensors", steps="4")
    # Moments: a negative second moment, a NaN first moment.
    opt = last / "optimizer.safetensors"
    good = load_file(str(opt))
    bad = dict(good)
    k = next(k for k in bad if k.startswith("exp_avg_sq."))
    bad[k] = bad[k].copy()
    bad[k].flat[0] = -1.0
    save_file(bad, str(opt), metadata={"steps": "4"})
    clean_error(train(cfg, "--resume"), "optimizer.safetensors", k, "negative")
    bad = dict(good)
    k = next(k for k in bad if k.startswith("exp_avg."))
    bad[k] = bad[k].copy()
    bad[k].flat[0] = np.nan
    save_file(bad, str(opt), metadata={"steps": "4"})
    clean_error(train(cfg, "--resume"), "optimizer.safetensors", k, "non-finite")
    save_file(good, str(opt), metadata={"steps": "4"})
    # A weight with NaN and infinity: the checkpoint's file and tensor are named at load, not the next save.
    weights = last / "model.safetensors"
    good_w = load_file(str(weights))
    bad = dict(good_w)
    k = "model.layers.0.mlp.up_proj.weight"
    bad[k] = bad[k].copy()
    bad[k].flat[:3] = [np.nan, np.inf, -np.inf]
    save_file(bad, str(weights), metadata={"format": "pt"})
    clean_error(train(cfg, "--resume"), f"{k} in {weights} has 3 non-finite values")
    save_file(good_w, str(weights), metadata={"format": "pt"})
    # Restored, the run resumes (and is complete).
    r = train(cfg, "--resume")
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------------------------------------------
# Crafted SentencePiece models


def varint(v):
    out = b""
    while v >= 0x80:
        out += bytes([(v & 0x7F) | 0x80])
        v >>= 7
    return out + bytes([v])


def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def test_crafted_sentencepiece_models_are_refused(tmp):
    run_cli("drope-data", "prepare", "-i", "/usr/share/common-licenses/GPL-3", "--paragraphs", "--out", tmp / "ds",
            "--train-tokenizer",
            "--vocab-size", 1000)
    good = (tmp / "ds" / "tokenizer.model").read_bytes()
    text = tmp / "t.txt"
    text.write_text("Hello AAA world")
    # A normaliser trie whose root points 2^29 units away (libsentencepiece reads there unchecked).
    trie = struct.pack("<I", 1 << 31 | 1 << 9) + bytes(2044)
    charsmap = struct.pack("<I", len(trie)) + trie + b"a\0"
    cases = {
        "trie.model": (good + field(3, field(2, charsmap)), "precompiled_charsmap"),
        "nan.model": (good + field(1, field(1, b"zz") + b"\x15" + struct.pack("<f", float("nan"))), "non-finite score"),
        "cut.model": (good[:-3], "SentencePiece"),
    }
    for name, (data, needle) in cases.items():
        p = tmp / name
        p.write_bytes(data)
        clean_error(run_cli("drope-data", "encode", "--tokenizer", p, "--text", text, check=False), name, needle)


def micro_model(tmp, name="m"):
    out = tmp / name
    run_cli("drope-model", "init", "--preset", "micro", "--out", out, "--quiet")
    return out


def test_rope_parameters_and_rope_scaling_that_disagree_are_refused(tmp):
    """transformers reads rope_scaling before rope_parameters: a config.json whose two objects name different
    scalings is refused (it would be plain RoPE one way and linear x4 the other)."""
    m = micro_model(tmp)
    cfg = json.loads((m / "config.json").read_text())
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    (m / "config.json").write_text(json.dumps(cfg))
    os.remove(m / "drope.yaml")  # the HF files alone, as a user downloads them
    expect_error(run_cli("drope-model", "info", "--model", m, check=False),
                 "config.json: rope_parameters (default x1) and rope_scaling (linear x4) name different RoPE "
                 "scalings")
    cfg["rope_scaling"] = {"rope_type": "default", "rope_theta": 500000.0}  # the same type, another base
    (m / "config.json").write_text(json.dumps(cfg))
    expect_error(run_cli("drope-model", "info", "--model", m, check=False),
                 "config.json: rope_parameters.rope_theta (10000.0) and rope_scaling.rope_theta (500000.0) differ")
    cfg["rope_scaling"] = {}  # empty: no scaling to transformers either
    (m / "config.json").write_text(json.dumps(cfg))
    assert "scaling none (x1)" in run_cli("drope-model", "info", "--model", m).stdout
    cfg["rope_scaling"] = {"rope_type": "linear", "factor": 4.0}
    cfg["rope_parameters"].update(rope_type="linear", factor=4.0)  # both the same: one model, read as such
    (m / "config.json").write_text(json.dumps(cfg))
    r = run_cli("drope-model", "info", "--model", m)
    assert "scaling pi (x4)" in r.stdout, r.stdout  # position interpolation, HF's "linear"


def test_float16_output_that_overflows_is_refused(tmp):
    """A weight beyond float16's range is refused by name: written, it would be infinity, a model no reader
    (ours included) accepts."""
    m = micro_model(tmp)
    w = load_file(m / "model.safetensors")
    w["model.layers.0.mlp.up_proj.weight"][0, 0] = 1e5
    save_file(w, m / "model.safetensors", metadata={"format": "pt"})
    r = run_cli("drope-model", "convert", "--model", m, "--out", tmp / "m16", "--dtype", "float16", check=False)
    expect_error(r, "model.layers.0.mlp.up_proj.weight: 1 value beyond what float16 holds (largest magnitude 100000)")
    assert not (tmp / "m16").exists()
    run_cli("drope-model", "convert", "--model", m, "--out", tmp / "mbf", "--dtype", "bfloat16")


def test_a_damaged_log_line_is_refused_on_resume_not_dropped(tmp):
    """Resume keeps the log lines up to its step and drops a torn last line; a damaged line before the last stops
    the resume by its number (dropping it would lose a logged step)."""
    cfg = tmp / "t.yaml"
    cfg.write_text(TRAIN_CFG.format(out=tmp / "run"))
    run_cli("drope-train", cfg, "--quiet")
    log = tmp / "run" / "log.jsonl"
    lines = log.read_text().splitlines(True)
    i = next(k for k, line in enumerate(lines) if '"step":2,' in line)
    lines[i] = lines[i].replace('"loss":', '"loss";', 1)
    log.write_text("".join(lines))
    before = log.read_bytes()
    r = run_cli("drope-train", cfg, "--resume", "--set", "train.steps=6", check=False)
    expect_error(r, f"{log}: line {i + 1} is not a JSON object")
    assert log.read_bytes() == before
    # A torn last line (a killed run) is still dropped.
    log.write_text("".join(lines[:i]) + "".join(lines[i + 1:]) + '{"step":5,"lo')
    run_cli("drope-train", cfg, "--resume", "--set", "train.steps=6", "--quiet")
    steps = [json.loads(line)["step"] for line in log.read_text().splitlines()]  # every line JSON: the torn one gone
    assert steps[-1] == 6 and 2 not in steps, log.read_text()


def test_a_fitted_temperature_is_used_only_for_the_model_it_was_fitted_for(tmp):
    """temperature:auto refuses a c fitted at training length 32 for a run at 64, and for yarn:4."""
    m = micro_model(tmp)
    (m / "temperature.json").write_text(json.dumps({
        "kind": "temperature", "c": 0.5, "train_length": 32,
        "method": {"variant": "train_length:32", "positional": "rope", "rope_scaling": "none", "factor": 1.0}}))

    def logits(*extra):
        return run_cli("drope-eval", "offset-key", "--model", m, "--temperature", "auto", "--lengths", 64,
                       "--queries", 4, "--batch-size", 2, "--threads", 1, "--out", tmp / "ok" / "r", "--quiet",
                       *extra, check=False)

    r = logits("--train-length", "32")
    assert r.returncode == 0, r.stderr
    expect_error(logits("--train-length", "64"), "was fitted for training length 32, and this model has 64")
    expect_error(logits("--train-length", "32", "--rope-scaling", "yarn", "--factor", "4"),
                 'was fitted for RoPE scaling "none", and this model has "yarn"')


def test_resume_refuses_a_corpus_replaced_under_its_path(tmp):
    """A corpus replaced under its path is refused on resume (the run would go on with other data, and its
    validation loss would compare two different validation sets)."""
    corpus = tmp / "corpus.txt"
    shutil.copy("/usr/share/common-licenses/GPL-3", corpus)
    cfg = tmp / "t.yaml"
    cfg.write_text(TRAIN_CFG.format(out=tmp / "run").replace("/usr/share/common-licenses/GPL-3", str(corpus)))
    run_cli("drope-train", cfg, "--quiet")
    shutil.copy("/usr/share/common-licenses/Apache-2.0", corpus)
    r = run_cli("drope-train", cfg, "--resume", "--set", "train.steps=6", check=False)
    expect_error(r, f"data.text {corpus}: holds other content than the run of", "resuming would go on with other data")
    assert not (tmp / "run" / "checkpoints" / "step-00000006").exists()
    shutil.copy("/usr/share/common-licenses/GPL-3", corpus)  # restored: the run goes on
    run_cli("drope-train", cfg, "--resume", "--set", "train.steps=6", "--quiet")
    assert (tmp / "run" / "checkpoints" / "step-00000006").is_dir()
