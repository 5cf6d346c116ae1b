"""studies/run.sh rehearse at the `tiny` shape, end to end with the real tools: transformers'
random-weight HF directory → drope-data → drope-model drop --qk-norm qk → drope-train (torchrun, 2 ranks,
shard params, activation checkpointing) → drope-eval ppl / niah → export to the authors' HF format →
transformers' logits within 1e-4 of ours. Plus bad input (one clear line, exit 2, nothing written) and a
failing stage (FAIL line, the following stages skipped, exit 1). The real shapes (smollm-360m, llama2-7b-2l)
take minutes each: docs/results/rehearsal.md."""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, ROOT

SCRIPT = ROOT / "studies" / "run.sh"
STAGES = ["hf-init", "data", "drop", "recalibrate", "ppl", "niah", "export", "parity"]
LINE = re.compile(r"^\[rehearse (\S+)\] (\S+)\s+(ok|FAIL)\s+([\d.]+)s  (.*)$")


def rehearse(*args, cwd=None, timeout=900):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    env.setdefault("OMP_NUM_THREADS", "1")
    return subprocess.run(["bash", str(SCRIPT), "rehearse", *map(str, args)], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def stage_lines(stdout):
    return [m.groups() for m in map(LINE.match, stdout.splitlines()) if m]


def test_tiny_shape_end_to_end(tmp):
    out = tmp / "r"
    r = rehearse("--shape", "tiny", "--out", out, "--bin", BIN)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = stage_lines(r.stdout)
    assert [(shape, name, status) for shape, name, status, _, _ in lines] == [("tiny", s, "ok") for s in STAGES], \
        r.stdout
    doc = json.loads((out / "summary.json").read_text())
    assert doc["ok"] is True and [s["name"] for s in doc["stages"]] == STAGES
    st = {s["name"]: s for s in doc["stages"]}
    assert all(s["status"] == "ok" for s in st.values())
    assert doc["settings"]["shard"] == "params" and doc["settings"]["activation_checkpointing"] == "full"

    # the run really was the sharded one on 2 ranks, and it trained every tensor
    rec = st["recalibrate"]
    assert any("torchrun --no-python --standalone --nproc_per_node=2" in c for c in rec["commands"])
    cfg = (out / "recal.yaml").read_text()
    assert "shard: params" in cfg and "activation_checkpointing: full" in cfg and "phase: drope" in cfg
    n = rec["numbers"]
    assert "shard_bytes_rank0" in n and n["shard_bytes_rank0"]["gathered_peak"] > 0
    assert n["tensors_changed"] == n["tensors"] > 0
    assert n["loss_first"] > 0 and n["loss_last"] > 0 and n["tokens_per_s"] > 0
    assert sorted(n.get("peak_rss_bytes", {"rank-0": 1, "rank-1": 1})) == ["rank-0", "rank-1"]

    init = st["hf-init"]["numbers"]
    assert init["tokenizer_vocab"] == init["model_vocab"] == 512 and init["params"] > 0
    ppl = st["ppl"]["numbers"]["ppl@64"]
    assert 1 < ppl < 10 * st["ppl"]["numbers"]["model_vocab"]  # random weights: near the vocabulary size, finite
    assert 0 <= st["niah"]["numbers"]["avg"] <= 100
    exported = json.loads((out / "export" / "config.json").read_text())
    assert exported["model_type"] == "llama_drope" and exported["attention_type"] == "qk_norm_nope"
    assert not (out / "export" / "drope.yaml").exists()

    p = st["parity"]["numbers"]
    assert p["rel_err"] < 1e-4 and p["max_abs_logit"] > 0
    assert f"{p['rel_err']:.2e}" in r.stdout

    # an earlier rehearsal's outputs are replaced only with --force
    again = rehearse("--shape", "tiny", "--out", out, "--bin", BIN, timeout=60)
    assert again.returncode == 2 and "--force" in again.stderr and len(again.stderr.splitlines()) == 1
    assert json.loads((out / "summary.json").read_text())["ok"] is True


@pytest.mark.parametrize("args,needles", [
    (["--shape", "gpt5"], ["--shape", "invalid choice", "gpt5"]),
    (["--steps", "0"], ["--steps", ">= 1"]),
    (["--batch", "3"], ["--batch", "multiple of --nproc 2"]),
    (["--nproc", "0"], ["--nproc", ">= 1"]),
    (["--shape", "tiny", "--seq-len", "4096"], ["--seq-len", "512"]),
    (["--bin", "/nonexistent-drope-bin"], ["--bin /nonexistent-drope-bin: no such directory"]),
    (["--build", "/nonexistent-drope-bin"], ["--build /nonexistent-drope-bin: no such directory"]),
    (["--steps", "two"], ["--steps", "two"]),
])
def test_bad_input_is_one_line_and_writes_nothing(args, needles, tmp):
    r = rehearse(*args, "--out", tmp / "never", timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in r.stderr, (n, r.stderr)
    assert not (tmp / "never").exists()


def test_a_failing_stage_stops_the_rest(tmp):
    """drope-data fails (a fake tool): the data stage reports FAIL with the tool's message, the following
    stages are skipped, the exit status is 1; --out is relative to the caller's directory."""
    fake = tmp / "bin"
    fake.mkdir()
    for tool in ("drope-data", "drope-model", "drope-train", "drope-eval"):
        (fake / tool).write_text(f"#!/bin/sh\necho '{tool}: error: the fake tool fails' >&2\nexit 3\n")
        (fake / tool).chmod(0o755)
    r = rehearse("--shape", "tiny", "--out", "rel-out", "--bin", fake, cwd=tmp, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    lines = stage_lines(r.stdout)
    assert [(name, status) for _, name, status, _, _ in lines] == [("hf-init", "ok"), ("data", "FAIL")], r.stdout
    assert "drope-data exited 3" in lines[1][4]
    assert "the fake tool fails" in r.stderr  # the log's tail
    doc = json.loads((tmp / "rel-out" / "summary.json").read_text())
    assert doc["ok"] is False
    assert [s["status"] for s in doc["stages"]] == ["ok", "FAIL"] + ["skipped"] * 6
    assert (tmp / "rel-out" / "hf" / "config.json").is_file() and (tmp / "rel-out" / "hf" / "tokenizer.json").is_file()
