"""scripts/gpu-check.sh's summary: reads what each stage left in the output directory and writes
summary.json and summary.md there (atomically, after every stage, so a killed run keeps what it measured).

Layout of the output directory (gpu-check.sh writes it):
  stages/<name>.json     one per stage: {"status", "seconds", "budget_s", "log"} (status "ok", "FAILED (...)",
                         "dry run" or "skipped (...)")
  bench-attention-d<D>.json         drope-bench attention --device cuda --json (attention_bench_d<D>)
  train-qwen2/log.jsonl             drope-train's log of the qwen2-0.5b bf16 steps (train_step_qwen2_0_5b)
  train-qwen2-eager/log.jsonl       eager PyTorch (HF Qwen2) on the same step (train_step_qwen2_0_5b_eager)
  train-qwen2-compiled/log.jsonl    the same with torch.compile per decoder layer (train_step_qwen2_0_5b_compiled)
  nccl/log.jsonl, nccl.log          drope-train under torchrun, one rank, NCCL (nccl_smoke)
  greedy-cpu.json, greedy-cuda.json drope-bench generate on each device (greedy_gpu_vs_cpu)
  ctest-gpu.log                     ctest -L gpu (gpu_tests)
  real/run/log.jsonl, real/niah-*.json  DroPE of the real SmolLM2-135M and its NIAH tables (real_smollm2_drope)

Usage: python -m drope_scripts.gpu_check OUT_DIR STAGE [STAGE ...]   (the stages in the order they run)
"""
from __future__ import annotations

import contextlib
import json
import pathlib
import re
import statistics
import sys

from .atomic import write_atomic

# Every stage gpu-check.sh runs, in order (tests/py/test_gpu_check.py holds the script to this list).
STAGES = ("setup", "gpu", "gpu_tests", "attention_bench_d64", "attention_bench_d128", "train_step_qwen2_0_5b",
          "train_step_qwen2_0_5b_eager", "train_step_qwen2_0_5b_compiled", "train_step_qwen2_0_5b_fused_loss_off",
          "train_step_qwen2_0_5b_cuda_graphs",
          "nccl_smoke", "two_ranks",
          "greedy_gpu_vs_cpu", "real_smollm2_drope")
BENCH_T = 8192  # the summary's attention row: the reference length of docs/gpu.md


def _load(path: pathlib.Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _log_lines(path: pathlib.Path) -> list[dict]:
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if isinstance(j, dict):
            out.append(j)
    return out


def ctest_numbers(out: pathlib.Path) -> dict:
    """Passed / failed / skipped counts from ctest's output."""
    try:
        text = (out / "ctest-gpu.log").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    m = re.search(r"(\d+)% tests passed, (\d+) tests? failed out of (\d+)", text)
    if not m:
        return {}
    total, failed = int(m.group(3)), int(m.group(2))
    skipped = len(re.findall(r"\*\*\*Skipped|Not Run \(Disabled\)", text))
    return {"tests": total, "failed": failed, "skipped": skipped, "passed": total - failed - skipped}


def bench_numbers(path: pathlib.Path) -> dict:
    """Per case and implementation at T = BENCH_T (else the longest T measured): forward and forward+backward
    TFLOP/s, the plan backend that ran, and the status of what did not run."""
    doc = _load(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        return {}
    rows = [r for r in doc["rows"] if isinstance(r, dict)]
    lengths = sorted({r.get("T") for r in rows if isinstance(r.get("T"), int)})
    if not lengths:
        return {}
    T = BENCH_T if BENCH_T in lengths else lengths[-1]
    table = {}
    for r in rows:
        if r.get("T") != T:
            continue
        cell = {}
        for mode in ("fwd", "fwdbwd"):
            m = r.get(mode) or {}
            cell[mode] = m.get("tflops") if m.get("status") == "ok" else m.get("status", "not run")
            if m.get("backend"):
                cell[mode + "_backend"] = m["backend"]
        table.setdefault(str(r.get("case")), {})[str(r.get("impl"))] = cell
    return {"device": doc.get("device"), "T": T, "head_dim": (doc.get("options") or {}).get("head_dim"),
            "tflops": table, "json": str(path)}


def train_numbers(log: pathlib.Path) -> dict:
    """tokens/s and MFU of the steps after the first two (warm-up), median over steps; loss of the last step."""
    steps = [j for j in _log_lines(log) if "tokens_per_s" in j]
    if not steps:
        return {}
    steady = [j for j in steps if j.get("step", 0) > 2] or steps
    out = {"steps_logged": len(steps), "tokens_per_s": statistics.median(j["tokens_per_s"] for j in steady),
           "loss_last": steps[-1].get("loss")}
    if all("mfu" in j for j in steady):
        out["mfu"] = statistics.median(j["mfu"] for j in steady)
    if "allreduce_buckets" in steps[-1]:
        out["allreduce_buckets"] = steps[-1]["allreduce_buckets"]
    return out


def greedy_numbers(out: pathlib.Path) -> dict:
    """Whether the greedy tokens on CUDA equal those on the CPU; the first differing position otherwise."""
    cpu, gpu = _load(out / "greedy-cpu.json"), _load(out / "greedy-cuda.json")
    if not isinstance(cpu, dict) or not isinstance(gpu, dict):
        return {}
    a, b = cpu.get("tokens") or [], gpu.get("tokens") or []
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    res = {"tokens": len(a), "equal": first is None and len(a) > 0}
    if first is not None:
        res["first_difference"] = first
    return res


def real_numbers(out: pathlib.Path) -> dict:
    """The real-model DroPE run: loss curve (every logged step), tokens seen, fitted c, NIAH per method."""
    steps = [j for j in _log_lines(out / "real" / "run" / "log.jsonl") if "loss" in j and "step" in j]
    res: dict = {}
    if steps:
        res["loss_curve"] = [[j["step"], j["loss"]] for j in steps]
        res["loss_first"], res["loss_last"] = steps[0]["loss"], steps[-1]["loss"]
        if "tokens" in steps[-1]:
            res["tokens_seen"] = steps[-1]["tokens"]
    fit = _load(out / "real" / "fit.json")
    if isinstance(fit, dict) and "c" in fit:
        res["temperature_c"] = fit["c"]
    niah = {}
    for method in ("released", "yarn", "drope"):
        doc = _load(out / "real" / f"niah-{method}.json")
        if isinstance(doc, dict):
            table: dict = {}
            for r in doc.get("results", []):
                table.setdefault(str(r.get("length")), []).append(r.get("score", 0.0))
            niah[method] = {n: statistics.mean(v) for n, v in table.items() if v}
    if niah:
        res["niah"] = niah
    return res


def two_rank_numbers(log: pathlib.Path) -> dict:
    """Per two-rank run (shard mode - activation checkpointing): the largest loss difference to one rank, and
    the process-group backend the log names."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    diffs = {m.group(1): float(m.group(2)) for m in
             re.finditer(r"two ranks (\S+): max \|loss - one rank's\| = (\S+)", text)}
    backends = sorted(set(re.findall(r"two ranks \S+: backend (\w+)", text)))
    res: dict = {}
    if diffs:
        res["loss_max_diff"] = diffs
    if backends:
        res["backends"] = backends
    return res


# The training stages compared with the train stage's run (train-qwen2): stage -> (its run directory, the ratio's
# key, whether the ratio is drope-train's default step over it or (False) it over the default step).
TRAIN_RATIOS = {
    "train_step_qwen2_0_5b_eager": ("train-qwen2-eager", "drope_vs_eager", True),
    "train_step_qwen2_0_5b_compiled": ("train-qwen2-compiled", "drope_vs_compiled", True),
    "train_step_qwen2_0_5b_fused_loss_off": ("train-qwen2-fused-off", "fused_vs_unfused", True),
    "train_step_qwen2_0_5b_cuda_graphs": ("train-qwen2-cuda-graphs", "graphs_vs_default", False),
}


def stage_numbers(out: pathlib.Path, name: str) -> dict:
    if name == "gpu_tests":
        return ctest_numbers(out)
    if name.startswith("attention_bench_d"):
        return bench_numbers(out / f"bench-attention-{name.rsplit('_', 1)[1]}.json")
    if name == "train_step_qwen2_0_5b":
        return train_numbers(out / "train-qwen2" / "log.jsonl")
    if name in TRAIN_RATIOS:
        run, key, ours_over_it = TRAIN_RATIOS[name]
        res = train_numbers(out / run / "log.jsonl")
        ours = train_numbers(out / "train-qwen2" / "log.jsonl")
        if res.get("tokens_per_s") and ours.get("tokens_per_s"):
            ratio = ours["tokens_per_s"] / res["tokens_per_s"]
            res[key] = ratio if ours_over_it else 1 / ratio
        return res
    if name == "two_ranks":
        return two_rank_numbers(out / "stages" / "two_ranks.log")
    if name == "nccl_smoke":
        res = train_numbers(out / "nccl" / "log.jsonl")
        with contextlib.suppress(OSError):
            res["backend_nccl"] = "backend nccl" in (out / "stages" / "nccl_smoke.log").read_text(errors="replace")
        return res
    if name == "greedy_gpu_vs_cpu":
        return greedy_numbers(out)
    if name == "real_smollm2_drope":
        return real_numbers(out)
    return {}


def summarize(out: pathlib.Path, stages: list[str]) -> dict:
    """summary.json's document: the GPU, and per stage its status, time, budget and numbers."""
    doc = {"gpu": "none", "stages": {}}
    gpu = out / "gpu-name.txt"
    if gpu.is_file():
        doc["gpu"] = gpu.read_text(errors="replace").strip() or "none"
    for name in stages:
        rec = _load(out / "stages" / f"{name}.json")
        if not isinstance(rec, dict):
            rec = {"status": "not run"}
        rec.update(stage_numbers(out, name))
        if name == "greedy_gpu_vs_cpu" and rec.get("status") == "ok" and rec.get("equal") is False:
            rec["status"] = f"FAILED (tokens differ from position {rec.get('first_difference')})"
        doc["stages"][name] = rec
    return doc


def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.1f}"
    return "-" if x is None else str(x)


def markdown(doc: dict) -> str:
    lines = ["# GPU check", "", f"GPU: {doc['gpu']}", "", "| stage | status | seconds (budget) | numbers |",
             "|---|---|---|---|"]
    for name, rec in doc["stages"].items():
        nums = []
        if name == "gpu_tests" and "tests" in rec:
            nums.append(f"{rec['passed']} passed, {rec['failed']} failed, {rec['skipped']} skipped of {rec['tests']}")
        if "tokens_per_s" in rec:
            nums.append(f"{rec['tokens_per_s']:.0f} tokens/s")
        if "mfu" in rec:
            nums.append(f"MFU {100 * rec['mfu']:.1f} %")
        if "drope_vs_eager" in rec:
            nums.append(f"drope-train {rec['drope_vs_eager']:.2f}x eager")
        if "drope_vs_compiled" in rec:
            nums.append(f"drope-train {rec['drope_vs_compiled']:.2f}x torch.compile")
        if "fused_vs_unfused" in rec:
            nums.append(f"fused loss {rec['fused_vs_unfused']:.2f}x this")
        if "loss_max_diff" in rec:
            worst = max(rec["loss_max_diff"].values())
            nums.append(f"{len(rec['loss_max_diff'])} two-rank runs, max loss difference {worst:.1e}"
                        + (f" ({', '.join(rec['backends'])})" if rec.get("backends") else ""))
        if "backend_nccl" in rec:
            nums.append("NCCL process group" if rec["backend_nccl"] else "no NCCL process group in the log")
        if "equal" in rec:
            nums.append(f"{rec['tokens']} tokens " + ("equal" if rec["equal"] else
                                                      f"differ from position {rec.get('first_difference')}"))
        if "tflops" in rec:
            nums.append(f"T={rec['T']}, D={rec['head_dim']}: see below")
        if "loss_curve" in rec:
            nums.append(f"loss {rec['loss_first']:.3f} -> {rec['loss_last']:.3f} over {len(rec['loss_curve'])} logs"
                        + (f", {rec['tokens_seen']} tokens" if "tokens_seen" in rec else ""))
        for method, table in rec.get("niah", {}).items():
            nums.append(f"NIAH {method}: " + ", ".join(f"{n}: {v:.0f}" for n, v in table.items()))
        timed = isinstance(rec.get("seconds"), (int, float))
        secs = f"{rec['seconds']:.0f} ({rec.get('budget_s', '-')})" if timed else "-"
        lines.append(f"| {name} | {rec.get('status', 'not run')} | {secs} | {'; '.join(nums)} |")
    for name, rec in doc["stages"].items():
        if "tflops" not in rec:
            continue
        lines += ["", f"## {name}: TFLOP/s at T = {rec['T']}, D = {rec['head_dim']} (bf16; forward / forward+backward)",
                  "", "| case | impl | fwd | fwd+bwd | backend |", "|---|---|---:|---:|---|"]
        for case, impls in rec["tflops"].items():
            for impl, cell in impls.items():
                be = cell.get("fwd_backend", "")
                if cell.get("fwdbwd_backend", be) != be:
                    be = f"{be}/{cell['fwdbwd_backend']}"
                lines.append(f"| {case} | {impl} | {_fmt(cell.get('fwd'))} | {_fmt(cell.get('fwdbwd'))} "
                             f"| {be or '-'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: python -m drope_scripts.gpu_check OUT_DIR STAGE [STAGE ...]", file=sys.stderr)
        return 2
    out = pathlib.Path(argv[0])
    if not out.is_dir():
        print(f"gpu_check: {out} is not a directory", file=sys.stderr)
        return 2
    for i, name in enumerate(argv[1:]):
        if name not in STAGES:
            print(f"gpu_check: '{name}' is not a stage (expected some of: {', '.join(STAGES)})", file=sys.stderr)
            return 2
        if name in argv[1:i + 1]:
            print(f"gpu_check: stage '{name}' is named twice", file=sys.stderr)
            return 2
    doc = summarize(out, argv[1:])
    write_atomic(out / "summary.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(out / "summary.md", markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
