"""scripts/gpu-check.sh --rehearse: every stage of the GPU call runs end to end on the CPU, through the same stage
functions, commands and configs, with only the device and the sizes changed; what needs CUDA is named as skipped.
A stage whose command breaks fails here, on a machine without a GPU, before a lent GPU meets it."""
import json
import os
import subprocess

import pytest
from test_gguf import SMOLLM2 as SMOLLM2_PATH
from test_gpu_check import EXPECTED

from conftest import BIN, ROOT

SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def rehearse(tmp, *args, env_extra=None, timeout=900):
    env = dict(os.environ, DROPE_GPU_CHECK_OUT=str(tmp / "out"), DROPE_BUILD_DIR=str(BIN), OMP_NUM_THREADS="2")
    env.update(env_extra or {})
    return subprocess.run(["bash", str(SCRIPT), "--rehearse", *args], capture_output=True, text=True, env=env,
                          timeout=timeout)


def test_rehearsal_dry_run_lists_the_cpu_commands(tmp):
    r = rehearse(tmp, "--dry-run")
    assert r.returncode == 0, r.stdout + r.stderr
    text = r.stdout
    assert "attention --device cpu" in text and "--lengths 128,256" in text
    assert "tiny, random weights" in text and "device cpu" in text and "--shape tiny" in text
    assert "lengths 256,512, tasks single_1" in text
    doc = json.loads((tmp / "out" / "summary.json").read_text())
    assert list(doc["stages"]) == EXPECTED


@pytest.mark.skipif(not SMOLLM2_PATH.exists(), reason="SmolLM2 GGUF not fetched (scripts/fetch_smollm2.sh)")
def test_every_stage_runs_on_the_cpu(tmp):
    # as on a clean clone: no corpus built, so the real-model stage tokenises our own docs
    r = rehearse(tmp, env_extra={"DROPE_CORPUS_DIR": str(tmp / "no-corpus")})
    out = tmp / "out"
    doc = json.loads((out / "summary.json").read_text())
    st = {k: v["status"] for k, v in doc["stages"].items()}
    failed = {k: v for k, v in st.items() if not (v == "ok" or v.startswith(("ok;", "skipped")))}
    logs = {k: (out / "stages" / f"{k}.log").read_text()[-2000:] for k in failed
            if (out / "stages" / f"{k}.log").exists()}
    assert r.returncode == 0 and not failed, (failed, logs, r.stderr[-2000:])
    assert list(st) == EXPECTED
    assert st["gpu"] == "skipped (CUDA-only: nvidia-smi)"
    assert st["train_step_qwen2_0_5b_cuda_graphs"] == ("skipped (CUDA-only: train.cuda_graphs (drope-train refuses "
                                                       "it without CUDA))")
    assert st["setup"].startswith("ok; CUDA-only parts skipped: cuobjdump")
    assert st["gpu_tests"].startswith("ok; CUDA-only parts skipped: the GPU tests")
    assert st["nccl_smoke"].startswith("ok; CUDA-only parts skipped: NCCL")
    assert st["greedy_gpu_vs_cpu"].startswith("ok; CUDA-only parts skipped")
    for name in ("attention_bench_d64", "attention_bench_d128", "train_step_qwen2_0_5b", "train_step_qwen2_0_5b_eager",
                 "real_smollm2_drope"):
        assert st[name] == "ok", (name, st[name])
    # each stage left what the summary reads
    s = doc["stages"]
    assert s["train_step_qwen2_0_5b"]["tokens_per_s"] > 0 and s["train_step_qwen2_0_5b_eager"]["tokens_per_s"] > 0
    assert s["attention_bench_d64"]["head_dim"] == 64 and s["attention_bench_d128"]["head_dim"] == 128
    assert s["greedy_gpu_vs_cpu"]["equal"] is True
    assert s["nccl_smoke"]["allreduce_buckets"] >= 1
    for method in ("released", "yarn", "drope"):
        assert json.loads((out / "real" / f"niah-{method}.json").read_text()), method
    assert json.loads((out / "real" / "data" / "index.json").read_text())["tokenizer"]["file"] == "tokenizer.json"
    md = (out / "summary.md").read_text()
    assert "| gpu | skipped (CUDA-only: nvidia-smi) |" in md


def test_a_broken_stage_fails_the_rehearsal(tmp):
    """A stage command that cannot run fails the rehearsal and names the stage; the next stages still run."""
    r = rehearse(tmp, env_extra={"DROPE_BUILD_DIR": str(tmp / "empty-build")}, timeout=300)
    assert r.returncode != 0
    doc = json.loads((tmp / "out" / "summary.json").read_text())
    assert doc["stages"]["setup"]["status"].startswith("FAILED")
    assert "missing or not executable" in (tmp / "out" / "stages" / "setup.log").read_text()
    assert doc["stages"]["gpu"]["status"] == "skipped (CUDA-only: nvidia-smi)"
