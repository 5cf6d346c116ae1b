"""scripts/gpu-check.sh on the CPU: --dry-run lists every stage of docs/gpu.md, with its budget and
command, through the same code path a real run takes, and writes a summary naming every stage; the summary
module (drope_scripts.gpu_check) turns the stages' artifacts into numbers and verdicts."""
import json
import os
import pathlib
import re
import subprocess

from conftest import ROOT
from drope_scripts import gpu_check

SCRIPT = ROOT / "scripts" / "gpu-check.sh"
# The stages of docs/gpu.md; removing one from the script (or from gpu_check.STAGES) fails here.
EXPECTED = ["setup", "gpu", "gpu_tests", "attention_bench_d64", "attention_bench_d128", "train_step_qwen2_0_5b",
            "train_step_qwen2_0_5b_eager", "train_step_qwen2_0_5b_compiled", "train_step_qwen2_0_5b_fused_loss_off",
          "train_step_qwen2_0_5b_cuda_graphs",
            "nccl_smoke", "two_ranks",
            "greedy_gpu_vs_cpu", "real_smollm2_drope"]
STAGE_LINE = re.compile(r"stage (\w+) \(budget (\d+)s\): (.*)")


def dry_run(tmp, *args, env_extra=None):
    env = dict(os.environ, DROPE_GPU_CHECK_OUT=str(tmp / "out"), DROPE_BUILD_DIR=str(tmp / "build-gpu"))
    env.update(env_extra or {})
    return subprocess.run(["bash", str(SCRIPT), "--dry-run", *args], capture_output=True, text=True, env=env,
                          timeout=120)


def test_dry_run_prints_every_stage_with_budget_and_command(tmp):
    r = dry_run(tmp, "--cases", "causal")
    assert r.returncode == 0, r.stdout + r.stderr
    stages = [STAGE_LINE.search(line) for line in r.stdout.splitlines()]
    stages = [m for m in stages if m]
    assert [m.group(1) for m in stages] == EXPECTED
    assert list(gpu_check.STAGES) == EXPECTED
    cmd = {m.group(1): m.group(3) for m in stages}
    budget = {m.group(1): int(m.group(2)) for m in stages}
    # The whole call within 9 minutes on one H100 from a prebuilt bundle: 520 s for everything after the setup
    # stage's binary checks (docs/gpu.md).
    assert sum(v for k, v in budget.items() if k != "setup") <= 520, budget
    assert "DROPE_CUDA_ARCHS=80;90" in cmd["setup"] and "sm_90" in cmd["setup"] and "drope_gpu_tests" in cmd["setup"]
    assert "ctest -L gpu" in cmd["gpu_tests"]
    for d in (64, 128):
        c = cmd[f"attention_bench_d{d}"]
        for needle in ("attention --device cuda", "--dtype bfloat16", f"--head-dim {d}", "1024,", "16384", "--json",
                       "--cases causal"):
            assert needle in c, (needle, c)
    assert "qwen2-0.5b" in cmd["train_step_qwen2_0_5b"] and "bf16" in cmd["train_step_qwen2_0_5b"]
    assert "eager_train_cuda" in cmd["train_step_qwen2_0_5b_eager"] and "HF Qwen2" in cmd["train_step_qwen2_0_5b_eager"]
    assert "eager_train_cuda" in cmd["train_step_qwen2_0_5b_compiled"]
    compiled = cmd["train_step_qwen2_0_5b_compiled"]
    assert "--compile" in compiled and "torch.compile" in compiled
    assert "--compile" not in cmd["train_step_qwen2_0_5b_eager"]
    assert "torchrun --no-python --nproc_per_node=1" in cmd["nccl_smoke"]
    assert "DROPE_DIST_SINGLE_RANK_GROUP=1" in cmd["nccl_smoke"] and "cuda" in cmd["nccl_smoke"]
    assert "--device cpu" in cmd["greedy_gpu_vs_cpu"] and "--device cuda" in cmd["greedy_gpu_vs_cpu"]
    assert "train.fused_loss=false" in cmd["train_step_qwen2_0_5b_fused_loss_off"]
    assert "train.cuda_graphs=true" in cmd["train_step_qwen2_0_5b_cuda_graphs"]
    assert "train.chunked_loss=false" in cmd["train_step_qwen2_0_5b_cuda_graphs"]
    two = cmd["two_ranks"]
    assert "--nproc_per_node=2" in two and "device cuda" in two and "none/optimizer/grads/params" in two
    assert "SmolLM2-135M" in cmd["real_smollm2_drope"] and "QK-norm" in cmd["real_smollm2_drope"]
    assert "NIAH 4K..32K" in cmd["real_smollm2_drope"] and "YaRN" in cmd["real_smollm2_drope"]
    # Nothing was built or run, and the summary names every stage.
    assert not (tmp / "build-gpu" / "build.ninja").exists()
    doc = json.loads((tmp / "out" / "summary.json").read_text())
    assert list(doc["stages"]) == EXPECTED
    assert all(s["status"] == "dry run" for s in doc["stages"].values())
    md = (tmp / "out" / "summary.md").read_text()
    for name in EXPECTED:
        assert f"| {name} | dry run |" in md


def test_bad_budget_override_is_a_clear_error(tmp):
    r = dry_run(tmp, env_extra={"DROPE_GPU_CHECK_BUDGET_NCCL_SMOKE": "1e9"})
    assert r.returncode == 2
    assert "DROPE_GPU_CHECK_BUDGET_NCCL_SMOKE='1e9'" in r.stdout + r.stderr
    r = dry_run(tmp, env_extra={"DROPE_GPU_CHECK_BUDGET_GPU": "30"})
    assert r.returncode == 0 and "stage gpu (budget 30s)" in r.stdout


def _stage(out, name, status="ok", seconds=1.5):
    (out / "stages").mkdir(parents=True, exist_ok=True)
    (out / "stages" / f"{name}.json").write_text(
        json.dumps({"status": status, "seconds": seconds, "budget_s": 60, "log": "x"}))


def test_summary_reads_every_stage_artifact(tmp):
    out = tmp
    for name in EXPECTED:
        _stage(out, name)
    (out / "gpu-name.txt").write_text("NVIDIA H100 80GB HBM3\n")
    (out / "ctest-gpu.log").write_text("100% tests passed, 0 tests failed out of 37\n")
    rows = []
    for T in (4096, 8192):
        rows.append({"case": "causal", "impl": "flash", "T": T,
                     "fwd": {"status": "ok", "tflops": 300.0 + T, "backend": "flash"},
                     "fwdbwd": {"status": "ok", "tflops": 200.0, "backend": "flash"}})
        rows.append({"case": "alibi", "impl": "flash", "T": T,
                     "fwd": {"status": "ok", "tflops": 250.0, "backend": "flash"},
                     "fwdbwd": {"status": "n/a: FlashAttention-2's backward has no ALiBi"}})
    (out / "bench-attention-d64.json").write_text(json.dumps({"device": "CUDA: H100", "options": {"head_dim": 64},
                                                              "rows": rows}))
    (out / "train-qwen2").mkdir()
    (out / "train-qwen2" / "log.jsonl").write_text("\n".join(json.dumps(j) for j in [
        {"step": 1, "loss": 12.0, "tokens_per_s": 1000.0, "mfu": 0.01},
        {"step": 2, "loss": 11.0, "tokens_per_s": 50000.0, "mfu": 0.30},
        {"step": 3, "loss": 10.0, "tokens_per_s": 60000.0, "mfu": 0.40},
        {"step": 4, "loss": 9.0, "tokens_per_s": 80000.0, "mfu": 0.50},
        {"step": 4, "val_loss": 9.5}]) + "\n")
    (out / "train-qwen2-eager").mkdir()
    (out / "train-qwen2-eager" / "log.jsonl").write_text("\n".join(json.dumps(j) for j in [
        {"step": 1, "loss": 12.0, "tokens_per_s": 900.0}, {"step": 2, "loss": 11.0, "tokens_per_s": 30000.0},
        {"step": 3, "loss": 10.0, "tokens_per_s": 35000.0}]) + "\n")
    (out / "train-qwen2-compiled").mkdir()
    (out / "train-qwen2-compiled" / "log.jsonl").write_text("\n".join(json.dumps(j) for j in [
        {"step": 1, "loss": 12.0, "tokens_per_s": 10.0}, {"step": 2, "loss": 11.0, "tokens_per_s": 20000.0},
        {"step": 3, "loss": 10.0, "tokens_per_s": 56000.0}, {"step": 4, "loss": 9.0, "tokens_per_s": 56000.0}]) + "\n")
    (out / "greedy-cpu.json").write_text(json.dumps({"tokens": [5, 6, 7, 8]}))
    (out / "greedy-cuda.json").write_text(json.dumps({"tokens": [5, 6, 9, 8]}))
    (out / "nccl").mkdir()
    (out / "nccl" / "log.jsonl").write_text(json.dumps({"step": 1, "loss": 5.0, "tokens_per_s": 1.0,
                                                        "allreduce_buckets": 2}) + "\n")
    (out / "stages" / "nccl_smoke.log").write_text("... backend nccl), device cuda:0\n")
    (out / "train-qwen2-fused-off").mkdir()
    (out / "train-qwen2-fused-off" / "log.jsonl").write_text("\n".join(json.dumps(j) for j in [
        {"step": 3, "loss": 10.0, "tokens_per_s": 56000.0}, {"step": 4, "loss": 9.0, "tokens_per_s": 56000.0}]) + "\n")
    (out / "stages" / "two_ranks.log").write_text(
        "two ranks none-none: backend gloo\ntwo ranks params-full: backend gloo\n"
        "two ranks none-none: max |loss - one rank's| = 2.00e-07 over 4 steps\n"
        "two ranks params-full: max |loss - one rank's| = 3.10e-06 over 4 steps\n")
    assert gpu_check.main([str(out), *EXPECTED]) == 0
    doc = json.loads((out / "summary.json").read_text())
    st = doc["stages"]
    assert doc["gpu"] == "NVIDIA H100 80GB HBM3"
    assert st["gpu_tests"]["tests"] == 37 and st["gpu_tests"]["failed"] == 0
    bench = st["attention_bench_d64"]
    assert bench["T"] == 8192 and bench["head_dim"] == 64
    assert bench["tflops"]["causal"]["flash"]["fwd"] == 300.0 + 8192
    assert bench["tflops"]["alibi"]["flash"]["fwdbwd"].startswith("n/a")
    assert st["attention_bench_d128"]["status"] == "ok" and "tflops" not in st["attention_bench_d128"]
    train = st["train_step_qwen2_0_5b"]
    assert train["tokens_per_s"] == 70000.0 and abs(train["mfu"] - 0.45) < 1e-12  # median of steps 3 and 4
    assert st["train_step_qwen2_0_5b_eager"]["tokens_per_s"] == 35000.0
    assert st["train_step_qwen2_0_5b_eager"]["drope_vs_eager"] == 2.0
    # the compiled steps after the first two (compilation) only: 70000 / 56000
    assert st["train_step_qwen2_0_5b_compiled"]["drope_vs_compiled"] == 1.25
    assert st["nccl_smoke"]["backend_nccl"] is True and st["nccl_smoke"]["allreduce_buckets"] == 2
    assert st["train_step_qwen2_0_5b_fused_loss_off"]["fused_vs_unfused"] == 1.25
    assert st["two_ranks"]["loss_max_diff"] == {"none-none": 2e-7, "params-full": 3.1e-6}
    assert st["two_ranks"]["backends"] == ["gloo"]
    greedy = st["greedy_gpu_vs_cpu"]
    assert greedy["equal"] is False and greedy["first_difference"] == 2
    assert greedy["status"].startswith("FAILED")  # the stage said ok; differing tokens make it a failure
    md = (out / "summary.md").read_text()
    assert "MFU 45.0 %" in md and "70000 tokens/s" in md and "differ from position 2" in md
    assert "drope-train 2.00x eager" in md and "drope-train 1.25x torch.compile" in md
    assert "fused loss 1.25x this" in md and "2 two-rank runs, max loss difference 3.1e-06 (gloo)" in md
    assert "| causal | flash | 8492.0 | 200.0 | flash |" in md


def test_summary_of_missing_stages_says_not_run(tmp):
    _stage(tmp, "setup", status="FAILED (exit 1)")
    assert gpu_check.main([str(tmp), *EXPECTED]) == 0
    doc = json.loads((tmp / "summary.json").read_text())
    assert doc["stages"]["setup"]["status"] == "FAILED (exit 1)"
    assert all(doc["stages"][n]["status"] == "not run" for n in EXPECTED[1:])


# The NCCL smoke run's code path on the CPU: DROPE_DIST_SINGLE_RANK_GROUP=1 under torchrun with one rank makes
# drope-train build a process group (Gloo here, NCCL with train.device cuda) and reduce gradients through it.
TRAIN_CFG = """run: {{name: g, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: {text}, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: constant, warmup: 0}}
train: {{steps: 4, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 0, keep_last: 1}}
"""
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "DROPE_DIST_SINGLE_RANK_GROUP")


def _train_cfg(tmp, name):
    p = tmp / f"{name}.yaml"
    p.write_text(TRAIN_CFG.format(out=tmp / name, text=ROOT / "docs"))
    return p


def _env(**extra):
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in DIST_VARS:
        e.pop(k, None)
    e.update(extra)
    return e


def _losses(run):
    return {j["step"]: j["loss"] for j in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if "loss" in j}


def test_single_rank_group_under_torchrun_reduces_through_the_group(tmp):
    import sys

    from conftest import BIN
    train = str(BIN / "drope-train")
    subprocess.run([train, str(_train_cfg(tmp, "plain")), "--quiet"], check=True, env=_env(), timeout=240)
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=1", "--standalone", train,
                        str(_train_cfg(tmp, "group"))], capture_output=True, text=True, timeout=240,
                       env=_env(DROPE_DIST_SINGLE_RANK_GROUP="1"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "backend gloo" in r.stdout, r.stdout
    logged = [json.loads(line) for line in (tmp / "group" / "log.jsonl").read_text().splitlines()]
    assert all(j["allreduce_buckets"] >= 1 for j in logged if "loss" in j)  # the gradients went through the group
    plain, group = _losses(tmp / "plain"), _losses(tmp / "group")
    assert sorted(plain) == sorted(group) == [1, 2, 3, 4]
    for s in plain:
        assert abs(plain[s] - group[s]) <= 1e-6 * abs(plain[s]), (s, plain[s], group[s])
    # Without the variable a single rank has no group (and no bucket counts in the log).
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=1", "--standalone", train,
                        str(_train_cfg(tmp, "none"))], capture_output=True, text=True, timeout=240, env=_env())
    assert r.returncode == 0 and "backend none" in r.stdout, r.stdout + r.stderr[-2000:]


def test_single_rank_group_variable_is_validated(tmp):
    from conftest import BIN, expect_error
    r = subprocess.run([str(BIN / "drope-train"), str(_train_cfg(tmp, "bad"))], capture_output=True, text=True,
                       timeout=120, env=_env(DROPE_DIST_SINGLE_RANK_GROUP="yes"))
    expect_error(r, "DROPE_DIST_SINGLE_RANK_GROUP='yes'", "expected 0 or 1")
    r = subprocess.run([str(BIN / "drope-train"), str(_train_cfg(tmp, "noport"))], capture_output=True, text=True,
                       timeout=120, env=_env(DROPE_DIST_SINGLE_RANK_GROUP="1"))
    expect_error(r, "DROPE_DIST_SINGLE_RANK_GROUP=1 needs MASTER_PORT")


def test_real_model_stage_numbers(tmp):
    """The real-model stage's summary: loss curve and tokens from the run's log, c, NIAH per method and length."""
    real = tmp / "real"
    (real / "run").mkdir(parents=True)
    (real / "run" / "log.jsonl").write_text(
        "\n".join(json.dumps({"step": s, "loss": 4.0 - s / 100, "tokens": s * 65536}) for s in (10, 20, 30)) + "\n")
    (real / "fit.json").write_text(json.dumps({"c": 0.31}))
    for method, score in (("released", 90.0), ("yarn", 70.0), ("drope", 40.0)):
        rows = [{"task": t, "length": n, "score": score - (n > 8192) * 20} for t in ("a", "b") for n in (4096, 16384)]
        (real / f"niah-{method}.json").write_text(json.dumps({"results": rows}))
    rec = gpu_check.stage_numbers(tmp, "real_smollm2_drope")
    assert rec["loss_curve"] == [[10, 3.9], [20, 3.8], [30, 3.7]] and rec["tokens_seen"] == 30 * 65536
    assert rec["temperature_c"] == 0.31
    assert rec["niah"]["released"] == {"4096": 90.0, "16384": 70.0} and rec["niah"]["drope"]["16384"] == 20.0
    md = gpu_check.markdown({"gpu": "x", "stages": {"real_smollm2_drope": {"status": "ok", **rec}}})
    assert "loss 3.900 -> 3.700 over 3 logs, 1966080 tokens" in md and "NIAH yarn: 4096: 70, 16384: 50" in md
