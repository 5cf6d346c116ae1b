"""REPORT.md of reproduce.sh (scripts/drope_scripts/report.py) from a small fixture run directory."""
import json
import math

import pytest

from drope_scripts import offset_key_report, report


def bias_grad(rope, nope):
    """A version 0 bias_grad.json: per model and weighting, grad_all means per layer."""
    def model(pos, means):
        return {"name": f"tiny-{pos}", "positional": pos, "num_layers": len(means[0]),
                "weights": {w: [{"layer": l, "grad_all": {"mean": m}} for l, m in enumerate(ms)]
                            for w, ms in zip(("diagonal", "previous"), means)}}
    return {"description": "fixture", "models": [model("rope", rope), model("nope", nope)]}


def log(run_dir, ppls):
    run_dir.mkdir(parents=True)
    lines = [{"step": 10, "loss": 5.0}]
    for k, p in enumerate(ppls):
        lines += [{"step": 100 * (k + 1), "val_loss": math.log(p)}, {"step": 100 * (k + 1) + 1, "loss": 4.0}]
    (run_dir / "log.jsonl").write_text("".join(json.dumps(l) + "\n" for l in lines))


@pytest.fixture
def run(tmp_path):
    run = tmp_path / "reproduce"
    (run / "timing").mkdir(parents=True)
    for stage, s in {"corpus": 60, "fig3": 30, "train": 600, "niah": 120, "eval": 90, "offset-key-train": 120,
                     "offset-key-eval": 60}.items():
        (run / "timing" / stage).write_text(f"{s}\n")
    (run / "settings.txt").write_text("scale=reduced steps=120 seeds=2 trials=10 drop_at=105 C=256\n")
    (run / "fig3").mkdir()
    (run / "fig3" / "bias_grad.json").write_text(json.dumps(bias_grad([[2e-3, 4e-3], [1e-3, 1e-3]],
                                                                      [[1e-3, 1e-3], [5e-4, 2e-4]])))
    for name, ppls in {"rope": ([30, 20], [22]), "nope": ([24], [26]), "drope": ([21], [21.5]),
                       "alibi": ([30],)}.items():
        for seed, p in enumerate(ppls):
            log(run / "train" / f"{name}-s{seed}", p)
    (run / "results.md").write_text("| method | ppl@256 |\n|---|---|\n| RoPE | 20.00 |\n")
    ckpt = run / "train" / "drope-s0" / "checkpoints" / "step-00000120"
    ckpt.mkdir(parents=True)
    (ckpt / "temperature.json").write_text(json.dumps({"schema": "drope.results", "schema_version": 1,
                                                       "kind": "temperature", "c": 0.41234, "fits": []}))
    # offset-key: RoPE and DroPE+temp, one seed each (no test over seeds: every claim is inconclusive)
    (run / "offset-key" / "eval").mkdir(parents=True)
    files = {}
    for label, at_c, far in (("RoPE", 99.0, 40.0), ("DroPE+temp", 98.0, 85.0)):
        rows = [{"length": 128, "accuracy": at_c, "far_accuracy": None},
                {"length": 512, "accuracy": 70.0, "far_accuracy": far}]
        f = run / "offset-key" / "eval" / f"{label}.json"
        f.write_text(json.dumps({"schema": "drope.results", "schema_version": 1, "kind": "offset-key",
                                 "train_length": 128, "method": {"label": label}, "results": rows,
                                 "summary": offset_key_report.summary_of(rows)}))
        files[label] = [f]
    doc = offset_key_report.aggregate(files, 128, (1, 4), (200, 800))
    (run / "offset-key" / "results.json").write_text(json.dumps(doc))
    return run


SETTINGS = report.ReportSettings("reduced", 120, 105, 256, 10)


def test_final_validation_perplexity(run, tmp_path):
    assert report.final_val_ppl(run / "train" / "rope-s0") == pytest.approx(20.0)
    log(tmp_path / "none", [])
    assert math.isnan(report.final_val_ppl(tmp_path / "none"))


def test_table7_rows(run):
    lines = report.table7_section(run, 105)
    # rope 20, 22: mean 21, std √2, half-width t(0.975, 1)·√2/√2 = 12.7062;
    # drope 21, 21.5: std 0.3536, half-width 3.1766
    assert "| rope | 2 | 21.00 | 1.41 | 8.29 – 33.71 | 20.00 – 22.00 | +0.0 % |" in lines
    assert "| nope | 2 | 25.00 | 1.41 | 12.29 – 37.71 | 24.00 – 26.00 | +19.0 % |" in lines
    assert "| drope | 2 | 21.25 | 0.35 | 18.07 – 24.43 | 21.00 – 21.50 | +1.2 % |" in lines
    assert "| alibi | 1 | 30.00 | – | – | – | +42.9 % |" in lines
    assert not any(l.startswith("| rnope-swa") for l in lines)
    # gaps +5.0 % and −2.3 %; NoPE − DroPE 3.0 and 4.5: two seeds decide neither
    assert ("DroPE matches RoPE (per-seed gap ppl_DroPE / ppl_RoPE − 1 within ±5 %): **inconclusive** (gap: TOST "
            "(paired t), H1: |mean gap %| < 5, t(1) = ") in lines[-1]
    assert "DroPE better than NoPE (lower perplexity): **inconclusive** (NoPE − DroPE: paired t, H1: mean d > 0, " \
           "t(1) = 5, p = 0.0628; claim p = 2 × 0.0628 = 0.126 ≥ 0.05)" in lines[-1]
    assert "added at step 105 (7/8)" in lines[1]


def test_fig3_rows_and_verdict(run):
    doc = json.loads((run / "fig3" / "bias_grad.json").read_text())
    lines = report.fig3_section(doc)
    assert lines[2] == ("| layer | diagonal RoPE | diagonal NoPE | ratio | previous RoPE | previous NoPE | ratio |")
    assert lines[3] == "|---|---|---|---|---|---|---|"
    assert lines[4] == "| 0 | 2.000e-03 | 1.000e-03 | 2.00× | 1.000e-03 | 5.000e-04 | 2.00× |"
    assert lines[5] == "| 1 | 4.000e-03 | 1.000e-03 | 4.00× | 1.000e-03 | 2.000e-04 | 5.00× |"
    assert "every layer and weighting: **yes**" in lines[-1]
    doc["models"][1]["weights"]["previous"][1]["grad_all"]["mean"] = 1e-3  # a tie is not RoPE > NoPE
    assert "every layer and weighting: **no**" in report.fig3_section(doc)[-1]


def test_whole_report(run):
    text = report.build(run, SETTINGS)
    assert text.startswith("# DroPE reproduction at small scale (reduced)\n")
    assert "120 steps × 8 sequences × 256 tokens = 0.25M tokens each" in text
    assert "Wall time 18.0 min on this machine (corpus 1.0, Fig. 3 0.5, training 10.0, NIAH 2.0, perplexity + " \
           "temperature 1.5, offset-key training 2.0 + evaluation 1.0 min; each stage" in text
    assert "settings: `scale=reduced steps=120 seeds=2 trials=10 drop_at=105 C=256`" in text
    assert "| RoPE | 20.00 |" in text and "NIAH: 10 trials per task at 512 tokens" in text
    assert "- drope: c = 0.412\n" in text and "- nope:" not in text
    assert text.index("## 1. Fig. 3") < text.index("## 2. Table 7") < text.index("## 3–4.") < text.index(
        "## 5. Offset-key retrieval")
    assert "RoPE's step-600 checkpoint without RoPE, with QK-norm, recalibrated for 200 steps" in text
    assert "| method | C = 128 (all) | 4C = 512 (far) |\n|---|---:|---:|\n| RoPE | 99.0 | 40.0 |\n" \
           "| DroPE+temp | 98.0 | 85.0 |\n" in text  # files without query counts: one seed, the value alone
    assert "Plot: `offset-key/far.png`" in text and "The experiment's PyTorch pilot" in text
    assert "\nclaim (a) RoPE collapses beyond C on far needles (falls by more than 10 points): inconclusive (RoPE C " \
           "− 4C: one seed: no test over seeds)\n" in text
    assert "\nclaim (e) DroPE recovers RoPE's in-context accuracy (within 2 points) with 25 % (200 of 800 steps " \
           "recalibrating) of the budget: inconclusive (DroPE − RoPE at C: one seed: no test over seeds)\n" in text


def test_report_refuses_a_newer_results_file(run):
    p = run / "train" / "drope-s0" / "checkpoints" / "step-00000120" / "temperature.json"
    p.write_text(json.dumps({"schema": "drope.results", "schema_version": 2, "kind": "temperature", "c": 0.4}))
    with pytest.raises(report.results.ResultsError, match="schema_version 2 is not supported"):
        report.build(run, SETTINGS)
