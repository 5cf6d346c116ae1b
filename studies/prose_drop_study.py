"""When to drop on prose: the quickstart's tiny model (configs/train/quickstart-pretrain-rope.yaml, Jane Austen,
C = 256, T = 400 steps) over seeds, DroPE-recalibrated from RoPE's checkpoint at T − S for S = share · T steps
(configs/train/quickstart-drope.yaml, warm-up 10 % of S), so RoPE and every DroPE run have the same budget.
Reports per share the held-out perplexity at C and 2C of RoPE and DroPE and DroPE's in-context gap
(ppl_DroPE(C) / ppl_RoPE(C) − 1, per seed), mean and 95 % t interval over seeds (stats.py). The question of the
paper's Table 7 at quickstart scale; descriptive, nothing is selected on it.

  bash studies/run.sh prose_drop_study [--seeds 5] [--shares 12.5,25,50] [--jobs N]

Outputs in runs/prose-drop-study/ (--out): train/rope-s<seed>/, train/drope-r<share>-s<seed>/, eval/*.json
(drope-eval ppl), study.md / study.json. Finished runs and evaluations are reused; a killed run resumes.
"""
from __future__ import annotations

import functools
import json
import math
import os
import pathlib
import sys
from collections.abc import Sequence

from drope_scripts import cli, corpus, stats
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import NONE, ROOT, Driver, Method, checkpoint, config_steps, jobs_knob, run_pipeline

PRETRAIN = "configs/train/quickstart-pretrain-rope.yaml"
DROPE = "configs/train/quickstart-drope.yaml"
DATA = "runs/data/small"
C = 256


def share_slug(share: float) -> str:
    return f"r{share:g}".replace(".", "p")


def drop_steps(total: int, shares: Sequence[float]) -> dict[float, int]:
    """Recalibration steps S per share (percent of the budget T); each at least 1 and below T."""
    out = {}
    for share in shares:
        if not (0 < share < 100) or not math.isfinite(share):
            raise ValueError(f"--shares: each share must be a percentage in (0, 100), got {share:g}")
        s = round(total * share / 100)
        if not 1 <= s < total:
            raise ValueError(f"--shares: {share:g} % of {total} steps is {s} recalibration steps (need 1..{total - 1})")
        out[share] = s
    return out


def markdown(doc: dict) -> str:
    lines = [f"### When to drop on prose: quickstart model, T = {doc['steps']} steps, {doc['seeds']} seeds\n",
             "Held-out perplexity (sliding windows, 16K tokens) at C = 256 and 2C; DroPE recalibrates the last S "
             "steps of the budget from RoPE's checkpoint at T − S (no temperature). Gap = ppl_DroPE(C) / "
             "ppl_RoPE(C) − 1 per seed. Mean ± half-width of the 95 % t interval over seeds.\n",
             "| model | recalibration share (S) | ppl@C | ppl@2C | in-context gap vs RoPE |",
             "|---|---|---:|---:|---:|"]

    def cell(s: dict, fmt: str = ".2f") -> str:
        half = (s["ci_high"] - s["ci_low"]) / 2 if s["n"] > 1 else float("nan")
        return f"{s['mean']:{fmt}}" + (f" ± {half:{fmt.lstrip('+')}}" if s["n"] > 1 else "")

    lines.append(f"| RoPE | – | {cell(doc['rope']['ppl_c'])} | {cell(doc['rope']['ppl_2c'])} | – |")
    for row in doc["drope"]:
        gap = row["gap_pct"]
        lines.append(f"| DroPE | {row['share']:g} % ({row['steps']}) | {cell(row['ppl_c'])} | {cell(row['ppl_2c'])} "
                     f"| {cell(gap, '+.1f')} % |")
    return "\n".join(lines) + "\n"


def summary(values: list[float]) -> dict:
    s = stats.summarize(values)
    return {"n": s.n, "mean": s.mean, "ci_low": s.ci_low, "ci_high": s.ci_high, "min": s.min, "max": s.max,
            "values": values}


def study(argv: list[str]) -> int:
    ap = cli.Parser("prose_drop_study", prog="studies/run.sh prose_drop_study",
                    description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/prose-drop-study"))
    ap.add_argument("--seeds", type=cli.int_type(), default=5, help="seeds 0..N-1, N in 1..1000 (default 5)")
    ap.add_argument("--shares", default="12.5,25,50", help="recalibration shares of the budget, percent, in (0, 100)")
    ap.add_argument("--jobs", help="runs side by side, in 1..256 (default: half the CPUs)")
    cli.add_build_option(ap, None)
    a = ap.parse_args(argv)
    out = ap.check(cli.out_dir, cli.caller_path(a.out), "--out")
    os.chdir(ROOT)  # the configs and the corpus are named from the root
    if not 1 <= a.seeds <= 1000:
        ap.error(f"--seeds must be in 1..1000, got {a.seeds}")
    try:
        shares = [cli.to_float(x.strip(), "--shares") for x in a.shares.split(",")]
    except ValueError:
        ap.error(f"--shares must be a comma list of finite numbers, got '{a.shares}'")
    ap.check(corpus.knobs, "small")
    bin_dir = cli.checked_build(ap, a, None, ("drope-train", "drope-eval", "drope-data"))
    total = config_steps(PRETRAIN)
    steps = drop_steps(total, shares)
    jobs = jobs_knob({"--jobs": a.jobs} if a.jobs else {}, "--jobs")
    every = math.gcd(total, *(total - s for s in steps.values()))
    d = Driver("prose-drop-study", bin_dir, width=5, jobs=jobs)
    d.stage("corpus: Jane Austen (r-cran-janeaustenr), SentencePiece BPE vocab 2048, token shards")
    rc = corpus.main(["--small"])
    if rc:
        return rc
    (out / "eval").mkdir(parents=True, exist_ok=True)

    def ppl(model: pathlib.Path, name: str) -> dict:
        doc, _ = d.evaluate("ppl", Method(name, model), out / "eval" / name,
                            ("--tokenizer", DATA, "--data", DATA, "--lengths", C, 2 * C, "--max-tokens", 16384), "ppl")
        return {"c": doc["summary"][f"ppl@{C}"], "2c": doc["summary"][f"ppl@{2 * C}"]}

    def one_seed(seed: int) -> dict:
        rope = out / "train" / f"rope-s{seed}"
        d.train(PRETRAIN, rope, total, [f"run.name=prose-rope-s{seed}", f"run.seed={seed}",
                                        f"train.checkpoint_every={every}", f"train.keep_last={total // every}"],
                show=NONE)
        got = {"rope": ppl(checkpoint(rope, total), f"rope-s{seed}")}
        for share, s in steps.items():
            name = f"drope-{share_slug(share)}-s{seed}"
            d.train(DROPE, out / "train" / name, s,
                    [f"run.name=prose-{name}", f"run.seed={seed + 1}", f"train.steps={s}",
                     f"schedule.warmup={max(1, s // 10)}", f"train.log_every={max(1, s // 4)}"],
                    [f"run.init={checkpoint(rope, total - s)}"], show=NONE)
            got[share] = ppl(checkpoint(out / "train" / name, s), name)
        d.say(f"seed {seed}: RoPE ppl@C {got['rope']['c']:.2f}; DroPE " + ", ".join(
            f"{share:g} % {got[share]['c']:.2f}" for share in steps))
        return got

    d.stage(f"RoPE {total} steps (checkpoint every {every}) and DroPE for the last "
            f"{', '.join(f'{s} ({sh:g} %)' for sh, s in steps.items())} steps × {a.seeds} seeds")
    per_seed = d.parallel([(f"s{seed}", functools.partial(one_seed, seed)) for seed in range(a.seeds)])
    doc = {"kind": "prose-drop-study", "steps": total, "seeds": a.seeds, "train_length": C,
           "rope": {"ppl_c": summary([g["rope"]["c"] for g in per_seed]),
                    "ppl_2c": summary([g["rope"]["2c"] for g in per_seed])},
           "drope": [{"share": share, "steps": s,
                      "ppl_c": summary([g[share]["c"] for g in per_seed]),
                      "ppl_2c": summary([g[share]["2c"] for g in per_seed]),
                      "gap_pct": summary([100 * (g[share]["c"] / g["rope"]["c"] - 1) for g in per_seed])}
                     for share, s in steps.items()]}
    write_atomic(out / "study.json", json.dumps(doc, indent=1) + "\n")
    text = markdown(doc)
    write_atomic(out / "study.md", text)
    d.stage(f"done in {d.elapsed()} s: {out}/study.md")
    print(text, end="")
    return 0


def main(argv: list[str]) -> int:
    return run_pipeline("prose_drop_study", lambda: study(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
