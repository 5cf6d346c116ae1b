"""Shared helpers for the Python oracle tests: run our CLIs from the build tree."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(os.environ.get("DROPE_BIN", ROOT / "build"))
sys.path.insert(0, str(ROOT / "scripts"))  # drope_scripts, the scripts' shared Python package
sys.path.insert(1, str(ROOT))  # studies (studies/*.py)
sys.path.append(str(ROOT / "bench"))  # the benchmarks, run as files (bench/paper_plans.py)


def run_cli(*args, check=True):
    """Runs one of our binaries; returns the CompletedProcess. Fails the test on a non-zero exit if check."""
    r = subprocess.run([str(BIN / args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=240)
    if check and r.returncode != 0:
        raise AssertionError(f"{args} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def micro_train_yaml(out, steps):
    """A drope-train config of the micro preset on a licence text: `steps` steps, a log line and an eval each."""
    return (f"run: {{name: t, out_dir: {out}, seed: 5}}\n"
            "model: {preset: micro, max_position: 32}\n"
            "data: {text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}\n"
            "optim: {lr: 3.0e-3}\n"
            f"schedule: {{type: cosine, warmup: 1, steps: {steps}}}\n"
            f"train: {{steps: {steps}, log_every: 1, eval_batches: 1}}\n")


def git_repo_with_build(tmp, tools):
    """A one-commit git checkout holding src/a.cpp, and a build directory with a stub of each of `tools`: the
    provenance checks' world (study.snapshot_tools / commit_stamp). Returns (repo, build)."""
    repo = tmp / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.cpp").write_text("int a;\n")
    for cmd in (["init", "-q"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", "-C", str(repo), *cmd], check=True)
    build = tmp / "build"
    build.mkdir()
    for t in tools:
        (build / t).write_text("#!/bin/sh\n")
    return repo, build


def expect_error(r, *needles):
    """A CLI failure: non-zero exit, one clear message containing every needle, no crash or traceback."""
    assert r.returncode != 0, f"expected failure, got success:\n{r.stdout}"
    err = r.stderr
    for bad in ("terminate called", "Segmentation", "Traceback", "core dumped", "Aborted"):
        assert bad not in err, err
    for n in needles:
        assert str(n) in err, f"'{n}' not in stderr:\n{err}"


def expect_model_dir_error(model_dir, tmp, *needles):
    """A bad model directory: `drope-model info` and `drope-eval logits` (the one loader behind every command
    that takes --model) both fail with one clear message containing every needle."""
    tj = pathlib.Path(tmp) / "error-tokens.json"
    tj.write_text("[[1, 2, 3]]")
    for cmd in (["drope-model", "info", "--model", model_dir],
                ["drope-eval", "logits", "--model", model_dir, "--tokens", tj, "--out",
                 pathlib.Path(tmp) / "l.safetensors"]):
        expect_error(run_cli(*cmd, check=False), *needles)


def our_logits(model_dir, tokens, tmp):
    """Logits from `drope-eval logits` as a numpy array (B, T, V)."""
    from safetensors.numpy import load_file

    tj = pathlib.Path(tmp) / "tokens.json"
    tj.write_text(json.dumps(tokens))
    out = pathlib.Path(tmp) / "logits.safetensors"
    run_cli("drope-eval", "logits", "--model", model_dir, "--tokens", tj, "--out", out)
    return load_file(str(out))["logits"]


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for a rendezvous store)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
