"""bf16 training: a tiny model's bf16 loss curve over 240 steps stays within a stated band of its float32 curve
(same data, seed and schedule); drope-bench peak measures a roof per dtype, and drope-train's MFU divides by the roof
of the dtype it trains in (train.peak_tflops still overrides). Speed is measured by the benchmarks, never here."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from conftest import BIN, run_cli

CFG = """run: {{name: t, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 64}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 64, batch_size: 8}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 10, steps: {steps}}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, checkpoint_every: 0, dtype: {dtype}}}
"""

# The band: over the run, the bf16 curve's mean gap to float32's (smoothed over 20 steps) is within 2 % of the
# float32 loss, and no smoothed point is more than 5 % off. bf16 rounds activations and the GEMMs' inputs to 8
# mantissa bits; the weights, their updates and the loss stay float32.
MEAN_BAND, MAX_BAND, SMOOTH = 0.02, 0.05, 20


def env(extra=None):
    e = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    e["OMP_NUM_THREADS"] = "1"
    return {**e, **(extra or {})}


def train(tmp, name, dtype, steps, extra_env=None, sets=()):
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(CFG.format(out=tmp / name, steps=steps, dtype=dtype))
    overrides = [arg for s in sets for arg in ("--set", s)]
    r = subprocess.run([str(BIN / "drope-train"), cfg, *overrides], capture_output=True, text=True,
                       env=env(extra_env), timeout=600)
    assert r.returncode == 0, r.stderr
    log = [json.loads(line) for line in (tmp / name / "log.jsonl").read_text().splitlines()]
    return [j for j in log if "loss" in j], r.stdout + r.stderr


def smooth(x):
    return np.convolve(x, np.ones(SMOOTH) / SMOOTH, mode="valid")


def test_bf16_loss_curve_stays_within_the_band_of_float32(tmp):
    # DROPE_BF16_EMULATED=1: the bf16 path runs on every CPU (emulated GEMMs where it lacks AMX / AVX512-BF16), so
    # this checks bf16 numerics on the CI machine whatever it is, not float32 against itself.
    steps = 240
    f32, _ = train(tmp, "f32", "float32", steps)
    b16, out = train(tmp, "b16", "bfloat16", steps, {"DROPE_BF16_EMULATED": "1"})
    assert FALLBACK not in out
    a = np.array([j["loss"] for j in f32])
    b = np.array([j["loss"] for j in b16])
    assert len(a) == len(b) == steps and np.isfinite(b).all()
    assert not np.array_equal(a, b), "the bf16 run reproduced float32 bit for bit: it did not compute in bf16"
    assert a[-1] < 0.7 * a[0], "the float32 run did not learn; the comparison would say nothing"
    gap = np.abs(smooth(b) - smooth(a)) / smooth(a)
    assert gap.mean() <= MEAN_BAND, f"mean relative gap {gap.mean():.4f}"
    assert gap.max() <= MAX_BAND, f"largest relative gap {gap.max():.4f} at step {gap.argmax() + SMOOTH}"
    assert "Traceback" not in out


def test_peak_measures_a_roof_per_dtype_and_saves_it(tmp):
    out = tmp / "peak.json"
    r = run_cli("drope-bench", "peak", "--rounds", "1", "--threads", "1", "--json", out)
    assert "roof float32:" in r.stdout and "roof bfloat16:" in r.stdout
    j = json.loads(out.read_text())
    assert j["threads"] == 1 and j["rounds"] == 1 and set(j["roof_gflops"]) == {"float32", "bfloat16"}
    for dtype in ("float32", "bfloat16"):  # the roof is the fastest shape's median
        medians = [s["median_gflops"] for s in j["shapes"] if s["dtype"] == dtype]
        assert len(medians) >= 4 and j["roof_gflops"][dtype] == pytest.approx(max(medians))
    saved = tmp / "saved.json"
    subprocess.run([str(BIN / "drope-bench"), "peak", "--rounds", "1", "--threads", "1", "--dtypes", "float32",
                    "--save"], check=True, capture_output=True, env=env({"DROPE_PEAK_FILE": str(saved)}))
    s = json.loads(saved.read_text())
    assert set(s["roof_gflops"]) == {"float32"} and s["threads"] == 1 and s["cpu"] and s["levels"]


def test_mfu_uses_the_roof_of_the_training_dtype(tmp):
    # A roof file of this machine's setting with made-up roofs: bf16's 4× float32's.
    probe = tmp / "probe.json"
    run_cli("drope-bench", "peak", "--rounds", "1", "--threads", "1", "--dtypes", "float32", "--json", probe)
    roof = json.loads(probe.read_text())
    roof_file = tmp / "roof.json"
    roof_file.write_text(json.dumps({"cpu": roof["cpu"], "levels": roof["levels"], "threads": 1,
                                     "roof_gflops": {"float32": 100.0, "bfloat16": 400.0}}))
    peak_env = {"DROPE_PEAK_FILE": str(roof_file)}
    per, computes = {}, {}
    for dtype in ("float32", "bfloat16"):
        log, out = train(tmp, f"mfu-{dtype}", dtype, 3, peak_env)
        # Without AMX tiles or AVX512-BF16 a bfloat16 run computes in float32 and says so: float32's roof applies.
        computes[dtype] = "float32" if FALLBACK in out else dtype
        assert f"measured {computes[dtype]} GEMM roof" in out
        per[dtype] = [j["mfu"] / j["tokens_per_s"] for j in log]  # = FLOPs per token / roof
        assert max(per[dtype]) == pytest.approx(min(per[dtype]), rel=1e-9)
    roof_used = {"float32": 100.0, "bfloat16": 400.0}[computes["bfloat16"]]
    assert per["float32"][0] / per["bfloat16"][0] == pytest.approx(roof_used / 100.0, rel=1e-9)
    # train.peak_tflops overrides the roof file.
    log, _ = train(tmp, "override", "bfloat16", 2, peak_env, sets=["train.peak_tflops=0.8"])
    assert log[0]["mfu"] / log[0]["tokens_per_s"] == pytest.approx(per["bfloat16"][0] * roof_used / 800.0, rel=1e-9)
    # A roof of another thread count is not used: no MFU.
    roof_file.write_text(json.dumps({"cpu": roof["cpu"], "levels": roof["levels"], "threads": 64,
                                     "roof_gflops": {"float32": 100.0, "bfloat16": 400.0}}))
    log, out = train(tmp, "other-threads", "float32", 2, peak_env)
    assert "mfu" not in log[0] and "another setting" in out


def _cpu_flags():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


FALLBACK = "so this run computes in float32"


@pytest.mark.parametrize("cap", [
    {"DROPE_CPU_ISA": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"},  # no bf16 instructions: emulated bf16 GEMMs
    {"ONEDNN_MAX_CPU_ISA": "avx512_core"},  # oneDNN capped below AVX512_CORE_BF16 (any case), drope at its native
])
def test_bf16_without_native_bf16_gemms_trains_in_float32_and_says_so(tmp, cap):
    if "DROPE_CPU_ISA" in cap and "avx2" not in _cpu_flags():
        pytest.skip("the CPU has no AVX2")
    # A roof file of this setting with made-up roofs, bf16's a tenth of float32's (as when emulated).
    probe = tmp / "probe.json"
    subprocess.run([str(BIN / "drope-bench"), "peak", "--rounds", "1", "--threads", "1", "--dtypes", "float32",
                    "--json", probe], check=True, capture_output=True, env=env(cap))
    roof = json.loads(probe.read_text())
    roof_file = tmp / "roof.json"
    roof_file.write_text(json.dumps({"cpu": roof["cpu"], "levels": roof["levels"], "threads": 1,
                                     "roof_gflops": {"float32": 100.0, "bfloat16": 10.0}}))
    cap = {**cap, "DROPE_PEAK_FILE": str(roof_file)}
    f32, _ = train(tmp, "f32", "float32", 4, cap)
    b16, out = train(tmp, "b16", "bfloat16", 4, cap)
    assert FALLBACK in out and "ONEDNN_MAX_CPU_ISA" in out
    assert [j["loss"] for j in b16] == [j["loss"] for j in f32]  # the same float32 path, bit for bit
    # DROPE_BF16_EMULATED=1 computes in bf16 all the same, and says so.
    forced, forced_out = train(tmp, "forced", "bfloat16", 4, {**cap, "DROPE_BF16_EMULATED": "1"})
    assert FALLBACK not in forced_out and [j["loss"] for j in forced] != [j["loss"] for j in f32]
    assert "emulated bf16 GEMMs (DROPE_BF16_EMULATED=1)" in forced_out
    # It computes in float32, so its MFU is against float32's roof, not the emulated bf16 one.
    assert "measured float32 GEMM roof" in out
    assert b16[0]["mfu"] / b16[0]["tokens_per_s"] == pytest.approx(f32[0]["mfu"] / f32[0]["tokens_per_s"], rel=1e-9)


def test_a_malformed_bf16_emulation_switch_is_refused(tmp):
    cfg = tmp / "c.yaml"
    cfg.write_text(CFG.format(out=tmp / "x", steps=2, dtype="bfloat16"))
    r = subprocess.run([str(BIN / "drope-train"), cfg], capture_output=True, text=True,
                       env=env({"DROPE_BF16_EMULATED": "yes"}), timeout=120)
    assert r.returncode != 0 and "DROPE_BF16_EMULATED='yes': expected 0 or 1" in r.stderr
    assert not (tmp / "x").exists()


def test_bf16_with_native_bf16_gemms_computes_in_bf16(tmp):
    flags = _cpu_flags()
    if not ({"amx_bf16", "avx512_bf16"} & flags and "avx512bw" in flags):
        pytest.skip("the CPU has neither AMX bf16 tiles nor AVX512-BF16")
    f32, _ = train(tmp, "f32", "float32", 4)
    b16, out = train(tmp, "b16", "bfloat16", 4)
    assert FALLBACK not in out
    if "amx_bf16" not in flags:
        assert "bf16 GEMMs on AVX512-BF16" in out
    a, b = np.array([j["loss"] for j in f32]), np.array([j["loss"] for j in b16])
    assert not np.array_equal(a, b) and np.allclose(a, b, rtol=0.05)  # rounded to bf16, and close
