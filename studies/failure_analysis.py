"""Why some DroPE seeds stay on the plateau (docs/results.md#why-some-seeds-stay-on-the-plateau): from a recovery
study directory (recovery_study.py), one recipe with a recovered and a plateaued seed, and what their heads do.

A DroPE seed is recovered when its held-out accuracy at C is within the tolerance (2 points) of its own RoPE
model's, as in the study, and on the plateau when it is in 40–60 %: NoPE's plateau (validation loss ≈ ln 4), where
the model finds the four needles but not which query it answers, ≈ (1 + 1/2 + 1/3 + 1/4) / 4 = 52 % when it only
rules out the colours already answered. The recipe is the first (by name) with both; --recipe and the seed flags
choose instead.

For six models (each DroPE model, the RoPE checkpoint it was dropped from, and that checkpoint right after the drop,
before any recalibration: drope-model drop with the run's QK-norm) drope-analyze head-scores measures every
layer × head on the same held-out offset-key sequences (the task's own generator): previous-token attention
over all positions, and at each answer position SEP its attention to the query marker Q_c just before it (the
previous-token step the task needs), to the block's earlier query markers, to the needle of colour c and to the
other needles. drope-analyze attention gives the maps of the two key heads of each model (its strongest SEP → Q_c
head and its strongest SEP → needle head) on the first sequence.

Writes to --out: models/dropped-s<seed>/ (the dropped checkpoints), <model>/head_scores.json (one per model),
maps/<model>/attention_L<l>_H<h>.json, summary.json and summary.md (the numbers), failure_analysis.{png,svg} (the
figure: RoPE and both DroPE models; needs matplotlib).

--all: instead of one pair, every DroPE seed of the study (recovered and failed, every recipe) and the RoPE
checkpoint each was dropped from (once per seed and drop step): head-scores of each, the best head's previous-token
score, SEP → Q_c and needle selectivity (own needle − another) per model, and their distributions over seeds per
group (RoPE, DroPE recovered, plateau, other failure): summary_all.{md,json}, failure_analysis_all.{png,svg}.
Finished head scores are reused, so the same command resumes.

Usage: bash studies/run.sh failure_analysis --study runs/recovery-study --out runs/failure-analysis [--all]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from drope_scripts import cli, results
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import NONE, Driver, ToolError

TOLERANCE = 2.0  # points, as recovery_study.TOLERANCE
PLATEAU = (40.0, 60.0)  # accuracy at C (%) counted as NoPE's plateau
EVAL_FILE = re.compile(r"drope-(?P<recipe>.+)-s(?P<seed>\d+)-(?P<split>heldout|test)\.json")
QUERY_BLOCK = 12  # Q_c SEP v_c for 4 colours (tasks/offset_key.h)


@dataclass(frozen=True)
class SeedResult:
    recipe: str
    seed: int
    accuracy: float  # DroPE at C (%)
    rope_accuracy: float  # the seed's RoPE model at C (%)

    @property
    def state(self) -> str:
        """recovered | plateau | other."""
        if self.accuracy >= self.rope_accuracy - TOLERANCE:
            return "recovered"
        return "plateau" if PLATEAU[0] <= self.accuracy <= PLATEAU[1] else "other"


def accuracy_at_c(path: pathlib.Path) -> float:
    doc = results.load(path, "offset-key")
    c = doc["train_length"]
    row = next((r for r in doc["results"] if r["length"] == c), None)
    if row is None:
        raise ValueError(f"{path}: no result at C = {c}")
    return float(row["accuracy"])


def scan(study: pathlib.Path, split: str) -> list[SeedResult]:
    """Every DroPE evaluation of `split` in the study whose seed's RoPE evaluation exists."""
    found = []
    for p in sorted((study / "eval").glob(f"drope-*-{split}.json")):
        m = EVAL_FILE.fullmatch(p.name)
        rope = study / "eval" / f"rope-s{m['seed']}-{split}.json" if m else None
        if m and rope.is_file():
            found.append(SeedResult(m["recipe"], int(m["seed"]), accuracy_at_c(p), accuracy_at_c(rope)))
    return found


def pick(found: Sequence[SeedResult], recipe: str | None = None, recovered: int | None = None,
         plateaued: int | None = None) -> tuple[SeedResult, SeedResult]:
    """(recovered, plateaued) seeds of one recipe: the lowest seed of each state, of the first recipe by name that
    has both, unless chosen. Raises ValueError listing what there is."""
    by_recipe: dict[str, list[SeedResult]] = {}
    for r in found:
        by_recipe.setdefault(r.recipe, []).append(r)
    for name in sorted(by_recipe) if recipe is None else [recipe]:
        seeds = sorted(by_recipe.get(name, []), key=lambda r: r.seed)
        rec = [r for r in seeds if r.state == "recovered" and recovered in (None, r.seed)]
        plat = [r for r in seeds if r.state == "plateau" and plateaued in (None, r.seed)]
        if rec and plat:
            return rec[0], plat[0]
    have = "; ".join(f"{name}: " + ", ".join(f"s{r.seed} {r.accuracy:.1f} % ({r.state})"
                                             for r in sorted(rs, key=lambda r: r.seed))
                     for name, rs in sorted(by_recipe.items())) or "no evaluated DroPE seeds"
    raise ValueError(f"no recipe with a recovered and a plateaued seed{f' ({recipe})' if recipe else ''}: {have}")


@dataclass(frozen=True)
class Model:
    key: str  # file name: rope-s1-700, dropped-s1, drope-s1
    label: str  # for the figure
    path: pathlib.Path  # model directory
    run: pathlib.Path | None  # training run directory (None: made here)


def run_paths(study: pathlib.Path, r: SeedResult) -> tuple[pathlib.Path, pathlib.Path, int, pathlib.Path, dict]:
    """(the RoPE checkpoint DroPE started from, the final DroPE checkpoint, the drop step, the run directory, its
    config) of one DroPE run; refused where a checkpoint is missing."""
    run = study / "train" / f"drope-{r.recipe}-s{r.seed}"
    cfg = yaml.safe_load((run / "config.yaml").read_text(encoding="utf-8"))
    init, steps = pathlib.Path(cfg["run"]["init"]), int(cfg["train"]["steps"])
    drope = run / "checkpoints" / f"step-{steps:08d}"
    for p in (init, drope):
        if not (p / "model.safetensors").is_file():
            raise ValueError(f"{p}: no model.safetensors")
    return init, drope, int(init.name.removeprefix("step-")), run, cfg


def drope_models(d: Driver, study: pathlib.Path, out: pathlib.Path, r: SeedResult,
                 state: str) -> tuple[Model, Model, Model]:
    """(the RoPE checkpoint at the drop step, that checkpoint just dropped as the run dropped it (drope-model drop
    into out/, no recalibration), the final DroPE checkpoint) of one DroPE run."""
    init, drope, drop_step, run, cfg = run_paths(study, r)
    dropped = out / "models" / f"dropped-s{r.seed}"
    d.tool("drope-model", "drop", "--model", init, "--qk-norm", cfg["drope"]["qk_norm"],
           *(["--per-head"] if cfg["drope"].get("per_head") else []), "--force", "--out", dropped, show=NONE)
    return (Model(f"rope-s{r.seed}-{drop_step}", f"RoPE s{r.seed}, step {drop_step}", init, init.parents[1]),
            Model(f"dropped-s{r.seed}", f"RoPE s{r.seed}, step {drop_step}, dropped (no recalibration)", dropped, None),
            Model(f"drope-s{r.seed}", f"DroPE s{r.seed}: {state}, {r.accuracy:.1f} %", drope, run))


def last_val_loss(run: pathlib.Path | None, at_step: int | None = None) -> float | None:
    """The run's validation loss at `at_step` (default: its last one) from log.jsonl."""
    loss = None
    if run is None:
        return None
    for line in (run / "log.jsonl").read_text(encoding="utf-8").splitlines():
        e = json.loads(line)
        if "val_loss" in e and (at_step is None or e.get("step") == at_step):
            loss = float(e["val_loss"])
    return loss


def key_heads(scores: dict) -> dict[str, dict]:
    """The model's strongest SEP → Q_c head and its most selective SEP → needle head (own needle minus another)."""
    heads = scores["heads"]
    return {"previous": max(heads, key=lambda h: h["answer_to_query"]),
            "needle": max(heads, key=lambda h: h["answer_to_needle"] - h["answer_to_other_needles"])}


def head_name(h: dict) -> str:
    return f"L{h['layer']}H{h['head']}"


def head_of(scores: dict, layer: int, head: int) -> dict:
    return next(h for h in scores["heads"] if (h["layer"], h["head"]) == (layer, head))


# ---- the figure --------------------------------------------------------------------------------------------

def compact_columns(layout: dict) -> tuple[list[list[int]], list[str], list[int | None]]:
    """Key columns of the compact maps: BOS, the four needles (by position), every other body position summed,
    then each query-block token. Returns (positions per column, labels, needle colour per column or None)."""
    T = len(layout["tokens"])
    needles = sorted(zip(layout["needle_positions"], layout["colours"]))
    body = set(range(1, T - QUERY_BLOCK)) - {n for n, _ in needles}
    cols, labels, colour = [[0]], ["BOS"], [None]
    for n, c in needles:
        cols.append([n]), labels.append(f"v{c} @{n}"), colour.append(c)
    cols.append(sorted(body)), labels.append("fillers Σ"), colour.append(None)
    for q, c in enumerate(layout["colours"]):
        at = layout["answer_positions"][q]
        for pos, name in ((at - 1, f"Q{c}"), (at, "SEP"), (at + 1, f"v{c}")):
            cols.append([pos]), labels.append(name), colour.append(c if name != "SEP" else None)
    return cols, labels, colour


def draw(models: Sequence[Model], scores: dict[str, dict], maps: dict[tuple[str, str], dict], layout: dict,
         map_models: Sequence[Model], out: pathlib.Path, title: str) -> None:
    """Left: the two key heads of each of map_models: the query block's attention on BOS, the needles, the fillers
    (summed) and the query block itself; right: per head and model, previous-token score, SEP → Q_c (tick: an
    earlier query marker) and SEP → its needle (tick: another needle)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colours = ["#1f77b4", "#2ca02c", "#9467bd", "#d62728"]  # needle / query colours 0..3
    model_colours = dict(zip((m.key for m in models), ["#7f7f7f", "#2ca02c", "#bcbd22", "#d62728"]))
    fig = plt.figure(figsize=(17, 11), layout="constrained")
    fig.suptitle(title, fontsize=12)
    left, right = fig.subfigures(1, 2, width_ratios=[1.25, 1])
    axes = left.subplots(len(map_models), 2)
    T = len(layout["tokens"])
    rows = list(range(T - QUERY_BLOCK, T))
    cols, labels, colour = compact_columns(layout)
    row_labels = labels[-QUERY_BLOCK:]
    im = None
    for i, m in enumerate(map_models):
        for j, which in enumerate(("previous", "needle")):
            ax = axes[i][j]
            doc = maps[(m.key, which)]
            a = np.array(doc["map"])
            grid = np.array([[a[r, cs].sum() for cs in cols] for r in rows])
            causal = np.array([[min(cs) > r for cs in cols] for r in rows])
            im = ax.imshow(np.ma.masked_where(causal, grid), aspect="auto", interpolation="nearest", cmap="viridis",
                           vmin=0, vmax=1)
            for q in range(len(layout["answer_positions"])):  # SEP rows: box its Q_c and its needle
                y = 3 * q + 1
                needle = 1 + sorted(layout["needle_positions"]).index(layout["needle_positions"][q])
                ax.add_patch(plt.Rectangle((needle - 0.5, y - 0.5), 1, 1, fill=False, ec="white", lw=1.5))
                ax.add_patch(plt.Rectangle((6 + 3 * q - 0.5, y - 0.5), 1, 1, fill=False, ec="orange", lw=1.5))
            ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6.5)
            ax.set_yticks(range(QUERY_BLOCK), row_labels, fontsize=6.5)
            for ticks, tick_colours in ((ax.get_xticklabels(), colour), (ax.get_yticklabels(), colour[-QUERY_BLOCK:])):
                for t, c in zip(ticks, tick_colours):
                    if c is not None:
                        t.set_color(colours[c])
            h = head_of(scores[m.key], doc["layer"], doc["head"])
            what = "SEP → Q_c" if which == "previous" else "SEP → needle"
            ax.set_title(f"{m.label}: {head_name(h)}, strongest {what}\nSEP → Q_c {h['answer_to_query']:.2f} "
                         f"(earlier Q {h['answer_to_earlier_queries']:.2f}), → needle {h['answer_to_needle']:.2f} "
                         f"(other {h['answer_to_other_needles']:.3f})", fontsize=8)
    left.colorbar(im, ax=axes, shrink=0.5, label="attention α (□ orange: SEP → its Q_c; □ white: → its needle)")
    left.suptitle("Query block (rows) of one held-out sequence attending to BOS, the needles, the fillers and the "
                  "block", fontsize=10)

    bars = right.subplots(3, 1, sharex=True)
    heads = scores[models[0].key]["heads"]
    x = np.arange(len(heads))
    width = 0.8 / len(models)
    panels = (("previous_token", None, "previous-token score\n(mean α_i,i−1 over all positions)"),
              ("answer_to_query", "answer_to_earlier_queries", "SEP → its Q_c\n(tick: → an earlier Q)"),
              ("answer_to_needle", "answer_to_other_needles", "SEP → its needle\n(tick: → another needle)"))
    for ax, (field, tick, title) in zip(bars, panels):
        for k, m in enumerate(models):
            hs = scores[m.key]["heads"]
            xs = x - 0.4 + width * (k + 0.5)
            ax.bar(xs, [h[field] for h in hs], width, color=model_colours[m.key], label=m.label)
            if tick:
                ax.plot(xs, [h[tick] for h in hs], "_", color="black", ms=6, mew=1.5)
        if field == "previous_token":  # what a head with uniform causal attention scores
            uniform = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
            ax.axhline(uniform, color="black", ls="--", lw=0.8, label=f"uniform causal attention ({uniform:.3f})")
        ax.set_ylabel(title, fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    bars[0].legend(fontsize=7, ncol=2, loc="upper left")
    bars[-1].set_xticks(x, [head_name(h) for h in heads], fontsize=8)
    bars[-1].set_xlabel("layer × head")
    right.suptitle(f"Every head, {scores[models[0].key]['sequences']} held-out sequences of {T} tokens", fontsize=10)
    for ext in ("png", "svg"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=110)
    plt.close(fig)


# ---- every seed --------------------------------------------------------------------------------------------

METRICS = (("previous_token", "strongest previous-token score"),
           ("answer_to_query", "strongest SEP → Q_c"),
           ("needle_selectivity", "most selective SEP → needle\n(own needle − another)"))
GROUPS = ("RoPE at the drop step", "DroPE recovered", "DroPE failed: plateau", "DroPE failed: other")


def head_metrics(scores: dict) -> dict[str, float]:
    """A model's three key numbers, each the best head's: previous-token score, SEP → Q_c, needle selectivity."""
    heads = scores["heads"]
    return {"previous_token": max(h["previous_token"] for h in heads),
            "answer_to_query": max(h["answer_to_query"] for h in heads),
            "needle_selectivity": max(h["answer_to_needle"] - h["answer_to_other_needles"] for h in heads)}


def group_summary(rows: Sequence[dict]) -> dict[str, dict]:
    """Per group and metric: n, median, min, max over its models."""
    out = {}
    for g in GROUPS:
        mine = [r for r in rows if r["group"] == g]
        out[g] = {"n": len(mine)}
        for key, _ in METRICS:
            vs = sorted(r[key] for r in mine)
            out[g][key] = None if not vs else {"median": statistics.median(vs), "min": vs[0], "max": vs[-1]}
    return out


def all_markdown(doc: dict) -> str:
    lines = [f"# Failure analysis over every seed: {doc['study']}", "",
             f"{doc['sequences']} held-out offset-key sequences of {doc['length']} tokens (seed {doc['task_seed']}) "
             "per model; each number is the model's best head. Recovered: within 2 points of the seed's RoPE model "
             "at C; plateau: 40–60 % at C; other: any other failure.", "",
             "| group | models | " + " | ".join(f"{label.splitlines()[0]}: median [min, max]" for _, label in METRICS) +
             " |", "|---|---:|" + "---|" * len(METRICS)]
    for g, s in doc["groups"].items():
        cells = ["–" if s[k] is None else f"{s[k]['median']:.3f} [{s[k]['min']:.3f}, {s[k]['max']:.3f}]"
                 for k, _ in METRICS]
        lines.append(f"| {g} | {s['n']} | " + " | ".join(cells) + " |")
    lines += ["", "| model | group | acc@C % | " + " | ".join(k for k, _ in METRICS) + " |",
              "|---|---|---:|" + "---:|" * len(METRICS)]
    for r in doc["models"]:
        acc = "–" if r["accuracy"] is None else f"{r['accuracy']:.1f}"
        lines.append(f"| {r['key']} | {r['group']} | {acc} | " + " | ".join(f"{r[k]:.3f}" for k, _ in METRICS) + " |")
    return "\n".join(lines) + "\n"


def draw_all(rows: Sequence[dict], out: pathlib.Path, title: str) -> None:
    """One panel per metric: every model as a point (jittered) over a box per group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    colours = ["#7f7f7f", "#2ca02c", "#d62728", "#ff7f0e"]
    fig, axes = plt.subplots(1, len(METRICS), figsize=(15, 5), layout="constrained")
    rng = np.random.default_rng(0)
    for ax, (key, label) in zip(axes, METRICS):
        data = [[r[key] for r in rows if r["group"] == g] for g in GROUPS]
        ax.boxplot([v if v else [np.nan] for v in data], widths=0.5, showfliers=False)
        for i, (vs, c) in enumerate(zip(data, colours), 1):
            ax.scatter(i + rng.uniform(-0.15, 0.15, len(vs)), vs, s=14, color=c, alpha=0.8, zorder=3)
        ax.set_xticks(range(1, len(GROUPS) + 1),
                      [f"{g}\n(n = {len(v)})" for g, v in zip(GROUPS, data)], fontsize=7.5, rotation=15)
        ax.set_ylabel(label, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title, fontsize=11)
    for ext in ("png", "svg"):
        fig.savefig(out.with_suffix(f".{ext}"), dpi=110)
    plt.close(fig)


def run_all(d: Driver, a: argparse.Namespace) -> dict:
    """Every DroPE seed of the study and the RoPE checkpoint it was dropped from (once per seed and drop step):
    head scores (reused where out/<model>/head_scores.json exists), their best heads, the distributions."""
    found = [r for r in scan(a.study, a.split) if r.state in ("recovered", "plateau", "other")]
    if not found:
        raise ValueError(f"{a.study}: no evaluated DroPE seeds")
    a.out.mkdir(parents=True, exist_ok=True)
    models: dict[str, tuple[pathlib.Path, str, float | None]] = {}  # key → (checkpoint, group, accuracy at C)
    for r in sorted(found, key=lambda r: (r.recipe, r.seed)):
        init, drope, drop_step, _, _ = run_paths(a.study, r)
        models.setdefault(f"rope-s{r.seed}-{drop_step}", (init, GROUPS[0], None))
        group = {"recovered": GROUPS[1], "plateau": GROUPS[2]}.get(r.state, GROUPS[3])
        models[f"drope-{r.recipe}-s{r.seed}"] = (drope, group, r.accuracy)
    d.stage(f"head-scores of {len(models)} models ({len(found)} DroPE seeds and their RoPE checkpoints)")
    rows, length = [], None
    for key, (path, group, acc) in models.items():
        scores_file = a.out / key / "head_scores.json"
        if not scores_file.is_file():
            d.tool("drope-analyze", "head-scores", "--model", path, "--task", "offset-key", "--sequences", a.sequences,
                   "--split", a.split, "--task-seed", a.task_seed, "--out", a.out / key, show=NONE)
        scores = results.load(scores_file, "head-scores")
        length = scores["length"]
        rows.append({"key": key, "model": str(path), "group": group, "accuracy": acc, **head_metrics(scores)})
    doc = {"study": str(a.study), "split": a.split, "sequences": a.sequences, "task_seed": a.task_seed,
           "length": length, "groups": group_summary(rows), "models": rows}
    write_atomic(a.out / "summary_all.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(a.out / "summary_all.md", all_markdown(doc))
    print(all_markdown(doc))
    d.stage("figure")
    draw_all(rows, a.out / "failure_analysis_all",
             f"Offset-key: the best heads of every DroPE seed of {a.study.name} and of the RoPE checkpoints they were "
             "dropped from")
    d.stage(f"done: {a.out}/failure_analysis_all.png")
    return doc


# ---- the run -----------------------------------------------------------------------------------------------

def summary_markdown(doc: dict) -> str:
    lines = [f"# Failure analysis: {doc['recipe']}", "",
             f"{doc['sequences']} held-out offset-key sequences of {doc['length']} tokens (seed {doc['task_seed']}).",
             "", "| model | acc@C % | val loss | prev-token head | prev-token score | SEP → Q_c | SEP → earlier Q "
             "| needle head | SEP → needle | SEP → other needle |", "|---|---:|---:|---|---:|---:|---:|---|---:|---:|"]
    for m in doc["models"]:
        p, n = m["previous_head"], m["needle_head"]
        acc = "–" if m["accuracy"] is None else f"{m['accuracy']:.1f}"
        loss = "–" if m["val_loss"] is None else f"{m['val_loss']:.3f}"
        lines.append(f"| {m['label']} | {acc} | {loss} | {head_name(p)} | {p['previous_token']:.3f} | "
                     f"{p['answer_to_query']:.3f} | {p['answer_to_earlier_queries']:.3f} | {head_name(n)} | "
                     f"{n['answer_to_needle']:.3f} | {n['answer_to_other_needles']:.4f} |")
    lines += ["", "Per head: `<model>/head_scores.json`. ln 4 = 1.386 (NoPE's plateau)."]
    return "\n".join(lines) + "\n"


def run(d: Driver, a: argparse.Namespace) -> dict:
    found = scan(a.study, a.split)
    rec, plat = pick(found, a.recipe, a.recovered_seed, a.plateaued_seed)
    d.stage(f"recipe {rec.recipe}: seed {rec.seed} recovered ({rec.accuracy:.1f} %), seed {plat.seed} on the "
            f"plateau ({plat.accuracy:.1f} %)")
    a.out.mkdir(parents=True, exist_ok=True)
    rope_r, dropped_r, drope_r = drope_models(d, a.study, a.out, rec, "recovered")
    rope_p, dropped_p, drope_p = drope_models(d, a.study, a.out, plat, "plateau")
    models = [rope_r, drope_r, rope_p, drope_p]  # the figure's
    every = [rope_r, dropped_r, drope_r, rope_p, dropped_p, drope_p]  # the summary's
    scores = {}
    for m in every:
        d.stage(f"head-scores: {m.label} ({m.path})")
        d.tool("drope-analyze", "head-scores", "--model", m.path, "--task", "offset-key", "--sequences", a.sequences,
               "--split", a.split, "--task-seed", a.task_seed, "--out", a.out / m.key, show=NONE)
        scores[m.key] = results.load(a.out / m.key / "head_scores.json", "head-scores")
    layout = dict(scores[rope_r.key]["task"]["layout"][0])
    layout["tokens"] = json.loads((a.out / rope_r.key / "sequences.json").read_text(encoding="utf-8"))[0]
    map_models = [rope_r, drope_r, drope_p]
    maps = {}
    for m in map_models:
        for which, h in key_heads(scores[m.key]).items():
            out = a.out / "maps" / m.key
            d.tool("drope-analyze", "attention", "--model", m.path, "--tokens", a.out / rope_r.key / "sequences.json",
                   "--max-tokens", len(layout["tokens"]), "--layer", h["layer"], "--head", h["head"], "--out", out,
                   show=NONE)
            maps[(m.key, which)] = results.load(out / f"attention_L{h['layer']}_H{h['head']}.json", "attention-map")
    accuracy = {drope_r.key: rec.accuracy, drope_p.key: plat.accuracy}
    doc = {"recipe": rec.recipe, "split": a.split, "sequences": a.sequences, "task_seed": a.task_seed,
           "length": scores[rope_r.key]["length"], "models": []}
    for m in every:
        heads = key_heads(scores[m.key])
        step = int(m.path.name.removeprefix("step-")) if m.run else None
        doc["models"].append({"key": m.key, "label": m.label, "model": str(m.path), "accuracy": accuracy.get(m.key),
                              "val_loss": last_val_loss(m.run, step), "previous_head": heads["previous"],
                              "needle_head": heads["needle"]})
    write_atomic(a.out / "summary.json", json.dumps(doc, indent=2) + "\n")
    write_atomic(a.out / "summary.md", summary_markdown(doc))
    print(summary_markdown(doc))
    d.stage("figure")
    draw(models, scores, maps, layout, map_models, a.out / "failure_analysis",
         f"Offset-key, DroPE recipe {rec.recipe}: a recovered and a plateaued seed, and the RoPE models they were "
         f"dropped from")
    d.stage(f"done: {a.out}/failure_analysis.png")
    return doc


def parse(argv: list[str]) -> argparse.Namespace:
    ap = cli.Parser("failure_analysis", prog="studies/run.sh failure_analysis", description=__doc__.splitlines()[0])
    ap.add_argument("--study", type=pathlib.Path, default=pathlib.Path("runs/recovery-study"),
                    help="recovery study directory (default runs/recovery-study)")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/failure-analysis"),
                    help="output directory (default runs/failure-analysis)")
    ap.add_argument("--recipe", help="the recipe's slug (default: the first with a recovered and a plateaued seed)")
    ap.add_argument("--all", action="store_true",
                    help="every DroPE seed of the study (recovered and failed, every recipe) and the RoPE checkpoints "
                         "they were dropped from: the best heads' scores as distributions over seeds "
                         "(summary_all.{md,json}, failure_analysis_all.{png,svg})")
    ap.add_argument("--recovered-seed", type=cli.int_type(0), help="the recovered seed (default: the lowest)")
    ap.add_argument("--plateaued-seed", type=cli.int_type(0), help="the plateaued seed (default: the lowest)")
    ap.add_argument("--split", choices=("heldout", "test"), default="heldout",
                    help="evaluations that classify the seeds, and the sequences measured (default heldout)")
    ap.add_argument("--sequences", type=cli.int_type(), default=256,
                    help="offset-key sequences per model, in 1..65536 (default 256)")
    ap.add_argument("--task-seed", type=cli.int_type(0), default=42, help="their generator seed (default 42)")
    cli.add_build_option(ap, "DROPE_BIN", dest="bin")
    a = ap.parse_args(argv)
    if a.all and (a.recipe or a.recovered_seed is not None or a.plateaued_seed is not None):
        ap.error("--all reads every seed of every recipe: no --recipe, --recovered-seed or --plateaued-seed")
    a.study, a.out = cli.caller_path(a.study).resolve(), cli.caller_path(a.out).resolve()
    if not 1 <= a.sequences <= 65536:
        ap.error(f"--sequences must be in [1, 65536], got {a.sequences}")
    ap.check(cli.out_dir, a.out, "--out")
    ap.check(cli.in_dir, a.study, "--study")
    if not (a.study / "eval").is_dir():
        ap.error(f"--study {a.study}: no eval/ directory (a recovery study's output)")
    a.bin = cli.checked_build(ap, a, "DROPE_BIN", ("drope-analyze", "drope-model"),
                              dest="bin").resolve()
    return a


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    a = parse(argv)
    d = Driver("failure-analysis", a.bin, width=4)
    try:
        (run_all if a.all else run)(d, a)
    except ToolError as e:
        print(f"failure_analysis: {e}", file=sys.stderr)
        return e.returncode or 1
    except ImportError as e:
        print(f"failure_analysis: the figure needs matplotlib (scripts/setup.sh installs it): {e}", file=sys.stderr)
        return 1
    except (results.ResultsError, ValueError, OSError, KeyError) as e:
        print(f"failure_analysis: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
