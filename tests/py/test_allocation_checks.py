"""Configs are checked before the model is allocated: a config that asks for more
memory than there is, or a config.json that does not describe the weights beside it, is one clear error
in well under a second, not an abort after allocating terabytes."""
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

BIN = pathlib.Path(os.environ.get("DROPE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build"))


def run(*args, timeout=60):
    t0 = time.monotonic()
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def test_huge_config_refused_before_allocating(tmp_path):
    cfg = tmp_path / "huge.yaml"
    # 2.8e11 parameters: within the config limits (2^40), 1 TiB of float32 weights.
    cfg.write_text("model:\n  preset: tiny\n  hidden_size: 16384\n  intermediate_size: 65536\n  num_layers: 64\n"
                   "  num_heads: 128\n  num_kv_heads: 128\n  head_dim: 128\n  vocab_size: 32000\n")
    r, _ = run(BIN / "drope-model", "init", "--config", cfg, "--out", tmp_path / "m")
    assert r.returncode == 1, r.stderr
    assert "GiB" in r.stderr and "available" in r.stderr and "Aborted" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "m").exists()


def test_config_json_that_does_not_match_the_weights(tmp_path):
    cfg = tmp_path / "micro.yaml"
    cfg.write_text("model:\n  preset: micro\n")
    r, _ = run(BIN / "drope-model", "init", "--config", cfg, "--out", tmp_path / "m")
    assert r.returncode == 0, r.stderr
    model = tmp_path / "m"
    hf = json.loads((model / "config.json").read_text())
    (model / "drope.yaml").unlink()  # config.json is then the model's config
    for key in ("hidden_size", "intermediate_size", "num_attention_heads"):
        broken = {k: v for k, v in hf.items() if k != key}  # missing sizes default to a 7B shape
        (model / "config.json").write_text(json.dumps(broken))
        r, secs = run(BIN / "drope-model", "info", "--model", model)
        assert r.returncode == 1, (key, r.stdout, r.stderr)
        assert "config" in r.stderr and ("disagree" in r.stderr or "GiB" in r.stderr or "missing" in r.stderr), r.stderr
        assert secs < 30
    bigger = dict(hf, num_hidden_layers=hf["num_hidden_layers"] + 1)
    (model / "config.json").write_text(json.dumps(bigger))
    r, _ = run(BIN / "drope-model", "info", "--model", model)
    assert r.returncode == 1 and "missing tensor" in r.stderr, r.stderr
    fewer = dict(hf, num_hidden_layers=1)
    (model / "config.json").write_text(json.dumps(fewer))
    r, _ = run(BIN / "drope-model", "info", "--model", model)
    assert r.returncode == 1 and "more than the config" in r.stderr, r.stderr


def test_size_flags_are_bounded_before_anything_runs(tmp_path):
    bench = [BIN / "drope-bench", "attention", "--cases", "causal", "--impls", "ours", "--repeats", "1", "--warmup",
             "0",
             "--quiet"]
    for extra, needle in [(["--lengths", "1000000000"], "--lengths"),
                          (["--lengths", "64", "--heads", "1000000000"], "--heads"),
                          (["--lengths", "64", "--head-dim", "1000000000"], "--head-dim"),
                          (["--lengths", "4194304", "--heads", "1024", "--head-dim", "1024"], "memory available")]:
        r, secs = run(*bench, *extra)
        assert r.returncode == 1 and needle in r.stderr, (extra, r.stderr)
        assert secs < 30
    r, _ = run(BIN / "drope-analyze", "bias-grad", "--seqs", "1000000000", "--out", tmp_path / "bg")
    assert r.returncode == 1 and "--seqs" in r.stderr, r.stderr
    assert not (tmp_path / "bg").exists()


def mem_available():
    for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def sparse_files(d, total, each=(4 << 30) - 1):
    """Files of `each` bytes (sparse: no disk used) under `d` adding up to at least `total` bytes."""
    d.mkdir(parents=True, exist_ok=True)
    for i in range(-(-total // each)):
        with open(d / f"part{i:03}.txt", "wb") as f:
            f.truncate(each)
    return d


def test_a_byte_corpus_larger_than_memory_is_refused_before_reading(tmp_path):
    """data.text is held in memory (one byte per token): a corpus larger than the memory available is one
    clear error naming data.text, found from the file sizes before anything is read."""
    corpus = sparse_files(tmp_path / "corpus", 2 * mem_available() + (1 << 30))
    cfg = tmp_path / "run.yaml"
    cfg.write_text(f"run: {{name: big, out_dir: {tmp_path / 'run'}}}\nmodel: {{preset: micro, max_position: 32}}\n"
                   f"data: {{text: {corpus}, seq_len: 32, batch_size: 4}}\ntrain: {{steps: 2}}\n")
    r, secs = run(BIN / "drope-train", cfg, "--quiet", timeout=120)
    assert r.returncode == 1, r.stderr
    assert f"data.text {corpus}" in r.stderr and "GiB" in r.stderr and "memory is available" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert secs < 30
    assert not (tmp_path / "run").exists()


def test_analyses_read_only_the_text_they_use(tmp_path):
    """attention --text reads --max-tokens bytes of its file and needle-attention only as much of its haystack
    as the prompt needs, so a file of nearly 4 GiB on one line costs nothing."""
    m = tmp_path / "m"
    r, _ = run(BIN / "drope-model", "init", "--preset", "micro", "--out", m)
    assert r.returncode == 0, r.stderr
    huge = tmp_path / "one-line.txt"
    with open(huge, "wb") as f:
        f.write(b"The grass is green. The sky is blue. " * 4)
        f.truncate((4 << 30) - 1)  # the rest: NUL bytes, no line break
    r, secs = run(BIN / "drope-analyze", "attention", "--model", m, "--text", huge, "--max-tokens", 16, "--layer", 0,
                  "--head", 0, "--out", tmp_path / "att")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "att" / "attention_L0_H0.png").exists() and secs < 60
    r, secs = run(BIN / "drope-analyze", "needle-attention", "--model", m, "--haystack", huge, "--length", 400,
                  "--out", tmp_path / "na")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "na" / "needle_attention.json").read_text())
    assert doc["runs"][0]["prompt_tokens"] == 400 and secs < 60


PEAK_RSS = """import json, resource, subprocess, sys
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
print(json.dumps({"rc": r.returncode, "stderr": r.stderr,
                  "rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def peak_rss(*args):
    """Runs a command; returns its exit status, stderr and peak resident memory (MiB)."""
    r = subprocess.run([sys.executable, "-c", PEAK_RSS, *map(str, args)], capture_output=True, text=True, timeout=120)
    return json.loads(r.stdout)


def test_weights_with_missing_layers_are_refused_before_allocating(tmp_path):
    """A config.json claiming 512 layers beside weights of two (layers 0 and 511, enough to match the first and
    last layer's shapes): every layer's projections are looked up in the headers before the model is built, so
    the missing layer is named without allocating the 1.6 GiB the config asks for."""
    from safetensors.numpy import load_file, save_file

    m = tmp_path / "m"
    r, _ = run(BIN / "drope-model", "init", "--preset", "micro", "--out", m)
    assert r.returncode == 0, r.stderr
    baseline = peak_rss(BIN / "drope-model", "info", "--model", m)
    assert baseline["rc"] == 0, baseline["stderr"]
    (m / "drope.yaml").unlink()
    layers, inter = 512, 4096
    hf = json.loads((m / "config.json").read_text())
    (m / "config.json").write_text(json.dumps(dict(hf, num_hidden_layers=layers, intermediate_size=inter)))
    w = load_file(str(m / "model.safetensors"))
    sparse = {k: v for k, v in w.items() if not k.startswith("model.layers.")}
    for src, dst in ((0, 0), (1, layers - 1)):
        for k, v in w.items():
            if k.startswith(f"model.layers.{src}."):
                if k.endswith("gate_proj.weight"):
                    v = np.zeros((inter, v.shape[1]), np.float16)
                sparse[f"model.layers.{dst}." + k[len(f"model.layers.{src}."):]] = v
    save_file(sparse, str(m / "model.safetensors"))
    got = peak_rss(BIN / "drope-model", "info", "--model", m)
    assert got["rc"] == 1, got["stderr"]
    assert got["rss_mib"] < baseline["rss_mib"] + 256, (got["rss_mib"], baseline["rss_mib"], got["stderr"])
    for needle in ("model.safetensors", "'model.layers.0.mlp.up_proj.weight'", "[4096, 64]", "config"):
        assert needle in got["stderr"], got["stderr"]
    assert len(got["stderr"].strip().splitlines()) == 1, got["stderr"]
