"""drope-train's long-context probes (eval.lengths, eval.niah_lengths): at step 0, at every train.eval_every and at
the end, the perplexity per window length and the NIAH cells equal `drope-eval ppl` and `drope-eval niah` on the
checkpoint of the same step (same numbers, same generated text); logged to log.jsonl and TensorBoard, drawn by
`drope-train plot`; bad eval.* keys refused naming the key."""
import json
import os
import subprocess

import pytest

from conftest import BIN, expect_error, run_cli

LENGTHS = (32, 64)
NIAH_LEN = 320
CFG = """run: {{name: p, out_dir: {out}, seed: 3}}
model: {{preset: micro, vocab_size: 600, max_position: 32}}
data: {{dataset: {ds}, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2, steps: 14}}
train: {{steps: 12, log_every: 4, eval_every: 6, eval_batches: 2, checkpoint_every: 6, keep_last: 3, tensorboard: true}}
eval: {{lengths: [32, 64], max_tokens: 1024, stride: 32, niah_lengths: [320], niah_trials: 2, niah_max_new_tokens: 12}}
"""


def env1():
    return dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("probes")
    r = subprocess.run([str(BIN / "drope-data"), "prepare", "--input", "/usr/share/common-licenses", "--paragraphs",
                        "--out", str(tmp / "ds"), "--train-tokenizer", "--vocab-size", "600", "--val-fraction", "0.1"],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    cfg = tmp / "p.yaml"
    cfg.write_text(CFG.format(out=tmp / "run", ds=tmp / "ds"))
    r = subprocess.run([str(BIN / "drope-train"), str(cfg)], capture_output=True, text=True, env=env1(), timeout=240)
    assert r.returncode == 0, r.stderr
    return tmp, r


def probe_lines(run_dir):
    lines = [json.loads(x) for x in (run_dir / "log.jsonl").read_text().splitlines()]
    return {j["step"]: j for j in lines if any(k.startswith("ppl@") for k in j)}


def test_probes_at_start_every_eval_and_end(run):
    tmp, r = run
    lines = probe_lines(tmp / "run")
    assert sorted(lines) == [0, 6, 12]
    for j in lines.values():
        assert {f"ppl@{L}" for L in LENGTHS} | {f"niah_single_1@{NIAH_LEN}"} <= set(j)
        assert all(j[f"ppl@{L}"] > 1 for L in LENGTHS) and 0 <= j[f"niah_single_1@{NIAH_LEN}"] <= 100
    # training lowers the perplexity the probe reads (the step-0 model is the random initialisation)
    assert lines[12]["ppl@32"] < lines[0]["ppl@32"]
    assert "long-context probe" in r.stderr + r.stdout
    for s in (0, 6, 12):
        assert (tmp / "run" / "probes" / f"niah-step-{s:08d}.jsonl").is_file()


@pytest.mark.parametrize("step", [6, 12])
def test_probe_equals_drope_eval(run, step):
    tmp, _ = run
    ckpt = tmp / "run" / "checkpoints" / f"step-{step:08d}"
    out = tmp / f"ppl{step}"
    run_cli("drope-eval", "ppl", "--model", ckpt, "--data", tmp / "ds", "--lengths", ",".join(map(str, LENGTHS)),
            "--max-tokens", 1024, "--stride", 32, "--out", out)
    summary = json.loads(out.with_suffix(".json").read_text())["summary"]
    line = probe_lines(tmp / "run")[step]
    for L in LENGTHS:
        assert line[f"ppl@{L}"] == pytest.approx(summary[f"ppl@{L}"], rel=1e-6), (L, line, summary)
    nout = tmp / f"niah{step}"
    run_cli("drope-eval", "niah", "--model", ckpt, "--tokenizer", tmp / "ds", "--tasks", "single_1", "--lengths",
            NIAH_LEN, "--trials", 2, "--max-new-tokens", 12, "--seed", 42, "--out", nout)
    theirs = [json.loads(x) for x in nout.with_suffix(".samples.jsonl").read_text().splitlines()]
    ours = [json.loads(x) for x in
            (tmp / "run" / "probes" / f"niah-step-{step:08d}.jsonl").read_text().splitlines()]
    assert len(ours) == len(theirs) == 2
    for a, b in zip(ours, theirs):
        for k in ("task", "length", "trial", "prompt_tokens", "expected", "output", "finish", "score"):
            assert a[k] == b[k], (k, a[k], b[k])
    summary = json.loads(nout.with_suffix(".json").read_text())["summary"]
    assert line[f"niah_single_1@{NIAH_LEN}"] == pytest.approx(summary[f"single_1@{NIAH_LEN}"])


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_draws_the_probe_panels(run, tmp):
    """Two more panels (perplexity per length, NIAH per length) than the same log without the probe lines."""
    src, _ = run
    run_cli("drope-train", "plot", src / "run", "--out", tmp / "with")
    bare = tmp / "bare"
    bare.mkdir()
    lines = (src / "run" / "log.jsonl").read_text().splitlines()
    (bare / "log.jsonl").write_text("\n".join(x for x in lines if "ppl@" not in x) + "\n")
    run_cli("drope-train", "plot", bare, "--out", tmp / "without")
    (w1, h1), (w0, h0) = png_size(tmp / "with.png"), png_size(tmp / "without.png")
    assert w1 * h1 >= 1.8 * w0 * h0, ((w1, h1), (w0, h0))
    # a malformed probe value is refused naming the line and key
    (bare / "log.jsonl").write_text(lines[0] + "\n" + '{"step": 3, "ppl@32": "x"}\n')
    expect_error(run_cli("drope-train", "plot", bare, check=False), "log.jsonl:2", "ppl@32")


def test_tensorboard_has_the_probe_scalars(run):
    tmp, _ = run
    events = list((tmp / "run").glob("events.out.tfevents.*"))
    assert events
    data = b"".join(p.read_bytes() for p in events)
    assert b"ppl@32" in data and f"niah_single_1@{NIAH_LEN}".encode() in data


BAD = [
    ("eval.lengths=[1]", "eval.lengths: each length must be in [2,"),
    ("eval.lengths=[64,64]", "eval.lengths: length 64 is given twice"),
    ("eval.lengths=[a]", "eval.lengths"),
    ("eval.max_tokens=0", "eval.max_tokens must be in [2,"),
    ("eval.stride=0", "eval.stride must be in [1,"),
    ("eval.niah_trials=0", "eval.niah_trials must be in [1, 4096]"),
    ("eval.niah_task=single_9", "eval.niah_task"),
    ("eval.niah_task=all", "eval.niah_task: one task"),
    ("eval.bogus=1", "bogus"),
    ("eval.niah_seed=-1", "eval.niah_seed must be >= 0"),
    ("eval.niah_lengths=[40]", "eval.niah_lengths: 40 tokens cannot hold a niah_single_1 prompt"),
]


@pytest.mark.parametrize("setting,needle", BAD)
def test_bad_eval_keys_are_refused(run, setting, needle):
    tmp, _ = run
    r = run_cli("drope-train", tmp / "p.yaml", "--set", setting, "--set", f"run.out_dir={tmp / 'bad'}", check=False)
    expect_error(r, needle)
    assert not (tmp / "bad").exists()


def test_probes_need_a_token_dataset(tmp):
    cfg = tmp / "t.yaml"
    cfg.write_text(CFG.format(out=tmp / "run", ds="x").replace("dataset: x", "text: /usr/share/common-licenses/GPL-3"))
    expect_error(run_cli("drope-train", cfg, check=False), "eval.lengths and eval.niah_lengths need data.dataset")


def test_resume_may_change_the_probes(run, tmp):
    """eval.* only reads the model: a resume with other probe settings is allowed and continues."""
    src, _ = run
    import shutil

    shutil.copytree(src / "run", tmp / "run")
    cfg = tmp / "p.yaml"
    cfg.write_text(CFG.format(out=tmp / "run", ds=src / "ds").replace("steps: 12,", "steps: 14,")
                   .replace("lengths: [32, 64]", "lengths: [48]"))
    r = subprocess.run([str(BIN / "drope-train"), str(cfg), "--resume", "--quiet"], capture_output=True, text=True,
                       env=env1(), timeout=240)
    assert r.returncode == 0, r.stderr
    assert "ppl@48" in probe_lines(tmp / "run")[14]
