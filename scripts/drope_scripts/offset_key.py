"""Offset-key retrieval (docs/design.md#offset-key-retrieval), the experiment quickstart and reproduce share: per
seed, pretrain RoPE at C = 128 (configs/train/offset-key-rope.yaml), recalibrate its step-400 checkpoint as DroPE
for the remaining 400 steps (offset-key-drope.yaml: equal budget), optionally NoPE from scratch (the RoPE config
with model.positional.type=nope); fit the temperature c of β = 1 + c·ln s on held-out offset-key sequences
(drope-eval fit-temperature --task offset-key); score every method at C, 2C, 4C, 8C (drope-eval offset-key:
accuracy overall, and on "far" needles, farther than C from the query); aggregate over seeds (mean and an
interval inside [0, 100]: stats.py); decide the experiment's claims (a)–(f) by the tests of the statistics
protocol (offset_key_report.py, docs/design.md#statistics-protocol); draw far accuracy vs length per method
(drope-eval compare --plot far). The cropped baseline RoPE crop (drope-eval offset-key --crop on the RoPE run:
beyond C it reads BOS and the last C − 1 tokens) is claim (c)'s reference. PI / NTK / YaRN with their own fitted
temperature, which claim (d) reads, run when the plan asks for them (Plan.scaled_temperature: one c per method,
seed and length, fitted on held-out sequences with that scaling and factor); without them (d) stays inconclusive
(or disagrees).

Layout of the experiment directory (quickstart and reproduce: <run>/offset-key/):
  train/{rope,drope,nope}-s<seed>/   drope-train runs; the DroPE/NoPE final checkpoints hold temperature.json
  fits/<slug>-s<seed>-L<length>.json the fitted temperature of a scaled method at one length (+temp methods)
  eval/<slug>-s<seed>.json           one offset-key results file per method and seed: drope-eval's, or, for the
                                     eval-time scaled methods (factor L/C, one invocation per length), merged
                                     here from eval/<slug>-s<seed>-L<length>.json
  results.{md,json,csv}              the table over seeds and the claim verdicts
  far.{png,svg}, far.{md,json,csv}   drope-eval compare --plot far (per label: mean over seeds, min–max band)
Finished training runs, temperature fits and evaluations are reused; DROPE_FORCE is the callers' (OUTPUTS).
"""
from __future__ import annotations

import functools
import json
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import results
from .atomic import write_atomic
from .driver import ALL, Driver, Method, Show, checkpoint, config_int, config_steps, train_state
from .offset_key_report import (
    CROP,
    DROPE_0,
    DROPE_T,
    KIND,
    NOPE_T,
    NTK,
    NTK_T,
    PI,
    PI_T,
    ROPE,
    YARN,
    YARN_T,
    aggregate,
    csv_text,
    markdown,
    summary_of,
)

ROPE_CONFIG = "configs/train/offset-key-rope.yaml"
DROPE_CONFIG = "configs/train/offset-key-drope.yaml"
TEMPERATURE_QUERIES = 256
# Settings every per-length file of a merged (method, seed) must share.
MERGE_KEYS = ("seed", "far_threshold", "train_length", "index_split")


@dataclass(frozen=True)
class Spec:
    """One method of the table: which model it evaluates and with which drope-eval options."""

    label: str
    slug: str
    model: str  # rope | nope | drope (the training run)
    scaling: str | None = None  # eval-time RoPE scaling, factor L/C, evaluated per length beyond C
    temperature: str | None = None  # --temperature: auto (the fitted c), a number, or FIT (fitted per length)
    crop: bool = False  # --crop: the cropped-context baseline (plain RoPE reading BOS + the last C − 1 tokens)


FIT = "fit"  # Spec.temperature of a scaled method with its own c, fitted per length with its scaling and factor
SPECS = (Spec(ROPE, "rope", "rope"), Spec(PI, "rope-pi", "rope", "pi"), Spec(NTK, "rope-ntk", "rope", "ntk"),
         Spec(YARN, "rope-yarn", "rope", "yarn"), Spec(PI_T, "rope-pi-temp", "rope", "pi", temperature=FIT),
         Spec(NTK_T, "rope-ntk-temp", "rope", "ntk", temperature=FIT),
         Spec(YARN_T, "rope-yarn-temp", "rope", "yarn", temperature=FIT), Spec(CROP, "rope-crop", "rope", crop=True),
         Spec(NOPE_T, "nope-temp", "nope", temperature="auto"),
         Spec(DROPE_T, "drope-temp", "drope", temperature="auto"), Spec(DROPE_0, "drope-c0", "drope", temperature="0"))

@dataclass(frozen=True)
class Plan:
    """What to run: seeds, queries per length and seed, lengths as multiples of C (1 = C), which methods."""

    seeds: tuple[int, ...]
    queries: int = 1000
    multipliers: tuple[int, ...] = (1, 2, 4, 8)
    nope: bool = False  # NoPE from scratch (+ fitted temperature)
    nope_seeds: int | None = None  # NoPE on the first n seeds only (None: every seed)
    drope_c0: bool = True  # DroPE without the temperature (claim f)
    scaled_temperature: bool = False  # PI / NTK / YaRN each with its own fitted temperature (claim d)
    train_show: Show = ALL  # what drope-train's stdout shows

    def specs(self) -> list[Spec]:
        return [s for s in SPECS if (self.nope or s.model != "nope") and (self.drope_c0 or s.label != DROPE_0)
                and (self.scaled_temperature or s.temperature != FIT)]

    def seeds_of(self, model: str) -> tuple[int, ...]:
        """The seeds a training run kind (rope, drope, nope) has."""
        return self.seeds[:self.nope_seeds] if model == "nope" and self.nope_seeds is not None else self.seeds


@dataclass(frozen=True)
class Outcome:
    """What run() made: the Markdown (results.md), the aggregate document, whether anything was computed now."""

    text: str
    doc: dict
    computed: bool


def describe(plan: Plan) -> str:
    """One line for a stage heading: what run() trains and evaluates."""
    c, rope_steps, drope_steps = context(ROPE_CONFIG), config_steps(ROPE_CONFIG), config_steps(DROPE_CONFIG)
    n = len(plan.seeds)
    n_nope = len(plan.seeds_of("nope"))
    first = f"seed {plan.seeds[0]}" if n_nope == 1 else f"the first {n_nope}"
    nope = (f", NoPE {rope_steps}" + (f" (on {first})" if n_nope < n else "") if plan.nope else "")
    return (f"RoPE at C = {c} for {rope_steps} steps, DroPE from its step {rope_steps - drope_steps} for "
            f"{drope_steps}{nope} × {n} seed{'s' if n > 1 else ''}; fitted temperature; accuracy at "
            f"{', '.join('C' if m == 1 else f'{m}C' for m in plan.multipliers)} for "
            f"{', '.join(s.label for s in plan.specs())} ({plan.queries} queries per length)")


def context(config: str | pathlib.Path) -> int:
    """data.seq_len of a drope-train config: the training context C."""
    return config_int(config, "data", "seq_len")


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def json_path(prefix: pathlib.Path) -> pathlib.Path:
    return prefix.with_name(prefix.name + ".json")


def merge(parts: Sequence[pathlib.Path], label: str) -> dict:
    """One offset-key results document from the per-length files of one method and seed (eval-time scaling
    with factor L/C needs one drope-eval call per length): their rows in length order, each with its "factor",
    the summary made from the rows, settings (MERGE_KEYS) that must agree, "method" of the first file without
    its per-length "factor" / "variant", labelled `label`, and the files in "merged_from"."""
    if not parts:
        raise ValueError(f"{label}: nothing to merge")
    docs = [results.load(p, KIND) for p in parts]
    first = docs[0]
    rows: list[dict] = []
    for p, doc in zip(parts, docs):
        for key in MERGE_KEYS:
            if doc.get(key) != first.get(key):
                raise results.ResultsError(f"{p}: {key} {json.dumps(doc.get(key))} differs from "
                                           f"{json.dumps(first.get(key))} in {parts[0]}")
        if len(doc.get("results", [])) != 1:
            raise results.ResultsError(f"{p}: expected the results of one length, found {len(doc.get('results', []))}")
        row = doc["results"][0]
        if any(r["length"] == row["length"] for r in rows):
            raise results.ResultsError(f"{p}: length {row['length']} is already in another file")
        method = doc.get("method", {})
        rows.append({**row, "factor": method.get("factor") if isinstance(method, dict) else None})
    rows.sort(key=lambda r: r["length"])
    method = {k: v for k, v in first.get("method", {}).items() if k not in ("factor", "variant")}
    method["label"] = label
    out = {"schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "kind": KIND, "method": method}
    out.update({k: first[k] for k in MERGE_KEYS if k in first})
    out.update({"merged_from": [str(p) for p in parts], "results": rows, "summary": summary_of(rows)})
    return out


# ---- the experiment ---------------------------------------------------------------------------------------

def run(d: Driver, out: pathlib.Path, plan: Plan, mark: Callable[[str, bool], None] = lambda stage, work: None
        ) -> Outcome:
    """Trains, fits, evaluates and aggregates into `out` (layout: module docstring). `mark(stage, computed)` is
    called after training + temperature fits ("offset-key-train") and after evaluation ("offset-key-eval")."""
    if not plan.seeds:
        raise ValueError("offset-key: no seeds")
    if any(m < 1 for m in plan.multipliers) or list(plan.multipliers) != sorted(set(plan.multipliers)):
        raise ValueError(f"offset-key: multipliers must be increasing positive integers, got {plan.multipliers}")
    c = context(ROPE_CONFIG)
    rope_steps, drope_steps = config_steps(ROPE_CONFIG), config_steps(DROPE_CONFIG)
    init_step = rope_steps - drope_steps  # equal budget: DroPE starts drope_steps before the RoPE run's end
    if init_step < 1:
        raise ValueError(f"{DROPE_CONFIG}: {drope_steps} steps leave no RoPE pretraining of the {rope_steps}")
    (out / "eval").mkdir(parents=True, exist_ok=True)
    specs = plan.specs()
    needed = {s.model for s in specs}
    computed = False

    def train(name: str, seed: int, config: str, steps: int, overrides: Sequence[str] = (),
              fresh: Sequence[str] = ()) -> pathlib.Path:
        nonlocal computed
        run_dir = out / "train" / f"{name}-s{seed}"
        if train_state(run_dir, steps) == "finished":
            d.say(f"{name} seed {seed}: done ({checkpoint(run_dir, steps)})")
        else:
            d.say(f"== offset-key {name} seed {seed}")
            computed = True
            d.train(config, run_dir, steps, [f"run.name=offset-key-{name}-s{seed}", f"run.seed={seed}", *overrides],
                    fresh, show=plan.train_show)
        return checkpoint(run_dir, steps)

    def rope_then_drope(seed: int) -> dict[tuple[str, int], pathlib.Path]:
        got = {("rope", seed): train("rope", seed, ROPE_CONFIG, rope_steps)}
        if "drope" in needed:
            init = checkpoint(out / "train" / f"rope-s{seed}", init_step)
            if train_state(out / "train" / f"drope-s{seed}", drope_steps) == "fresh" and \
                    not (init / "model.safetensors").is_file():
                raise ValueError(f"{init} is missing (the RoPE config must keep it: checkpoint_every, keep_last)")
            got["drope", seed] = train("drope", seed, DROPE_CONFIG, drope_steps, fresh=[f"run.init={init}"])
        return got

    def nope(seed: int) -> dict[tuple[str, int], pathlib.Path]:
        return {("nope", seed): train("nope", seed, ROPE_CONFIG, rope_steps, ["model.positional.type=nope"])}

    # Independent runs go to parallel workers (d.jobs): per seed RoPE then its DroPE, and NoPE.
    runs = [(f"rope s{seed}", functools.partial(rope_then_drope, seed)) for seed in plan.seeds]
    if "nope" in needed:
        runs += [(f"nope s{seed}", functools.partial(nope, seed)) for seed in plan.seeds_of("nope")]
    models: dict[tuple[str, int], pathlib.Path] = {}
    for got in d.parallel(runs):
        models.update(got)

    fit = ",".join(str(m) for m in plan.multipliers if m > 1)

    def fit_temperature(kind: str, seed: int) -> None:
        nonlocal computed
        model = models[kind, seed]
        if not (model / "temperature.json").is_file():
            d.tool("drope-eval", "fit-temperature", "--model", model, "--task", KIND, "--multipliers", fit,
                   "--queries", TEMPERATURE_QUERIES, show=3)
            computed = True
        fitted = results.load(model / "temperature.json", "temperature")["c"]
        d.say(f"{kind} seed {seed}: fitted temperature c = {fitted:.3f}")

    fitted_kinds = sorted({s.model for s in specs if s.temperature == "auto"})
    d.parallel([(f"fit {kind} s{seed}", functools.partial(fit_temperature, kind, seed))
                for kind in fitted_kinds for seed in plan.seeds_of(kind)])
    mark("offset-key-train", computed)
    computed = False

    lengths = [m * c for m in plan.multipliers]

    def fit_scaled(spec: Spec, seed: int, model: pathlib.Path, mult: int) -> float:
        """c of a scaled method at length mult·C: fitted with its scaling and factor on held-out sequences
        (fits/<slug>-s<seed>-L<length>.json, reused when there)."""
        nonlocal computed
        saved = out / "fits" / f"{spec.slug}-s{seed}-L{mult * c}.json"
        if not saved.is_file():
            saved.parent.mkdir(parents=True, exist_ok=True)
            d.tool("drope-eval", "fit-temperature", "--model", model, "--task", KIND, "--rope-scaling", spec.scaling,
                   "--factor", mult, "--lengths", mult * c, "--queries", TEMPERATURE_QUERIES, "--save", saved, show=3)
            computed = True
        fitted = results.load(saved, "temperature")["c"]
        d.say(f"{spec.label} seed {seed} at {mult}C: fitted temperature c = {fitted:.3f}")
        return float(fitted)

    def evaluate(spec: Spec, seed: int) -> pathlib.Path:
        nonlocal computed
        model = models[spec.model, seed]
        prefix = out / "eval" / f"{spec.slug}-s{seed}"
        common = ("--queries", plan.queries, "--seed", seed)
        if spec.scaling is None:
            options = ("--temperature", spec.temperature) if spec.temperature else ("--crop",) if spec.crop else ()
            doc, now = d.evaluate(KIND, Method(spec.label, model, options), prefix,
                                  ("--lengths", ",".join(map(str, lengths)), *common), KIND)
            computed |= now
        else:
            parts = []
            for mult in plan.multipliers:
                if mult == 1:
                    continue  # factor 1 is plain RoPE
                part = out / "eval" / f"{spec.slug}-s{seed}-L{mult * c}"
                options: tuple[object, ...] = ("--rope-scaling", spec.scaling, "--factor", mult)
                if spec.temperature == FIT:
                    options += ("--temperature", repr(fit_scaled(spec, seed, model, mult)))
                method = Method(spec.label, model, options)
                _, now = d.evaluate(KIND, method, part, ("--lengths", mult * c, *common), KIND)
                computed |= now
                parts.append(json_path(part))
            doc = merge(parts, spec.label)
            write_atomic(json_path(prefix), dump(doc))
        cells = ", ".join(f"{r['length']}: {r['accuracy']:.1f}" + (
            f" (far {r['far_accuracy']:.1f})" if r.get("far_accuracy") is not None else "") for r in doc["results"])
        d.say(f"{spec.label} seed {seed}: {cells}")
        return json_path(prefix)

    cells = [(spec, seed) for spec in specs for seed in plan.seeds_of(spec.model)]
    paths = d.parallel([(f"{spec.slug} s{seed}", functools.partial(evaluate, spec, seed)) for spec, seed in cells])
    files: dict[str, list[pathlib.Path]] = {}
    for (spec, _), path in zip(cells, paths):
        files.setdefault(spec.label, []).append(path)

    doc = aggregate(files, c, plan.multipliers, (drope_steps, rope_steps))
    write_atomic(out / "results.json", dump(doc))
    write_atomic(out / "results.csv", csv_text(doc))
    text = markdown(doc, str(out))
    write_atomic(out / "results.md", text)
    n = len(plan.seeds)
    d.compare([p for paths in files.values() for p in paths], out / "far",
              f"Offset-key: far-needle accuracy (%), C = {c}, {n} seed{'s' if n > 1 else ''}", plot="far")
    mark("offset-key-eval", computed)
    return Outcome(text, doc, computed)
