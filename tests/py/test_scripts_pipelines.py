"""quickstart and reproduce end to end with fake tools (no C++ binaries, no corpus download): the files they
write, the table they print, reuse on a second run, and the settings knobs."""
import json
import os
import pathlib
import re
import sys

import pytest

from drope_scripts import corpus, driver
from studies import offset_key_claims, prose_drop_study, quickstart, reproduce

FAKE_TOOL = r'''#!{python}
"""Fake drope-train / drope-eval / drope-analyze: records its arguments and writes what the pipelines read."""
import json, math, os, pathlib, sys

name, args = pathlib.Path(sys.argv[0]).name, sys.argv[1:]
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(" ".join([name, *args]) + "\n")

def opt(flag, default=None):
    return args[args.index(flag) + 1] if flag in args else default

sets = dict(a.split("=", 1) for a in args if "=" in a and args[args.index(a) - 1] == "--set")
if name == "drope-train":
    run = pathlib.Path(sets["run.out_dir"])
    steps, every = {"quickstart-pretrain-rope.yaml": (400, 100), "quickstart-drope.yaml": (100, 100),
                    "offset-key-rope.yaml": (800, 200),
                    "offset-key-drope.yaml": (400, 200)}.get(pathlib.Path(args[0]).name, (600, 150))
    steps, every = int(sets.get("train.steps", steps)), int(sets.get("train.checkpoint_every", every))
    for k in [*range(every, steps, every), steps]:
        (run / "checkpoints" / f"step-{k:08d}").mkdir(parents=True, exist_ok=True)
        (run / "checkpoints" / f"step-{k:08d}" / "model.safetensors").write_text("")
    seed = int(sets.get("run.seed", 0))
    (run / "log.jsonl").write_text(json.dumps({"step": steps, "val_loss": math.log(20 + seed)}) + "\n")
    print("step 1 | loss 7\nnoise\ndone")
elif name == "drope-analyze":
    out = pathlib.Path(opt("--out"))
    out.mkdir(parents=True)
    model = lambda pos, g: {"positional": pos, "num_layers": 1, "weights": {"diagonal": [{"grad_all": {"mean": g}}]}}
    (out / "bias_grad.json").write_text(json.dumps({"models": [model("rope", 2e-3), model("nope", 1e-3)]}))
elif args[0] == "fit-temperature":  # c = 0.5, or 0.1 × the factor of a scaled method (saved where --save says)
    c = 0.1 * float(opt("--factor")) if "--factor" in args else 0.5
    pathlib.Path(opt("--save", str(pathlib.Path(opt("--model")) / "temperature.json"))).write_text(
        json.dumps({"kind": "temperature", "c": c}))
else:
    out, label = opt("--out"), opt("--label")
    if args[0] == "compare":
        files = args[1:next(i for i, a in enumerate(args) if a.startswith("--"))]
        plot = f" plot {opt('--plot')}" if "--plot" in args else ""
        pathlib.Path(out + ".md").write_text(f"| compare {len(files)} files{plot}: {opt('--title')} |\n")
    elif args[0] == "offset-key":
        # accuracy 90 at every length; far accuracy 100 - 10 * L / 128 (+ 5 with the fitted temperature, + seed mod 10)
        bonus = (5 if opt("--temperature") == "auto" else 0) + int(opt("--seed")) % 10
        rows = [{"length": L, "accuracy": 90.0, "far_accuracy": None if L <= 128 else 100.0 - 10 * L / 128 + bonus,
                 "queries": 1000, "far_queries": 0 if L <= 128 else 500, "correct": 900,
                 "far_correct": 0 if L <= 128 else round(5 * (100.0 - 10 * L / 128 + bonus))}
                for L in map(int, opt("--lengths").split(","))]
        summary = {f"{k}@{r['length']}": r[a] for r in rows for k, a in (("acc", "accuracy"), ("far", "far_accuracy"))
                   if r[a] is not None}
        factor = float(opt("--factor")) if "--factor" in args else None
        pathlib.Path(out + ".json").write_text(json.dumps({
            "schema": "drope.results", "schema_version": 1, "kind": "offset-key", "seed": int(opt("--seed")),
            "far_threshold": 128, "train_length": 128, "index_split": "test",
            "method": {"label": label, "factor": factor, "train_length": 128}, "results": rows, "summary": summary}))
    else:
        summary = {"ppl@256": 3.0} if args[0] == "ppl" else {"avg": 12.5}
        if args[0] == "ppl" and "--lengths" in args:  # 3 at 256, +0.5 per 256 more; a prose DroPE model +0.3 × seed
            i, model = args.index("--lengths") + 1, opt("--model")
            extra = 0.3 * (1 + int(model.split("-s")[-1].split("/")[0])) if "/drope-r" in model else 0.0
            while i < len(args) and not args[i].startswith("--"):
                summary[f"ppl@{args[i]}"] = 3.0 + (int(args[i]) - 256) / 512 + extra
                i += 1
        pathlib.Path(out + ".json").write_text(json.dumps({"kind": args[0], "method": {"label": label},
                                                           "results": [], "summary": summary}))
        print(f"{label}  L=256  ppl=3.0")
'''


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Fake tools in DROPE_BUILD_DIR, the run directory under tmp_path, no corpus step."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("drope-train", "drope-eval", "drope-analyze", "drope-data"):
        (bin_dir / name).write_text(FAKE_TOOL.replace("{python}", sys.executable))
        (bin_dir / name).chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("DROPE_BUILD_DIR", str(bin_dir))
    monkeypatch.setenv("DROPE_RUN_DIR", str(tmp_path / "run"))
    for knob in ("DROPE_FORCE", "DROPE_REPRO_SCALE", "DROPE_REPRO_STEPS", "DROPE_REPRO_SEEDS", "DROPE_REPRO_TRIALS",
                 "DROPE_REPRO_OK_SEEDS"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setenv("DROPE_REPRO_JOBS", "1")  # one run at a time: the call order below is fixed
    monkeypatch.setattr(corpus, "main", lambda argv: 0)
    monkeypatch.chdir(tmp_path)  # the pipelines chdir to the repository root: restored after the test
    return tmp_path / "run", calls


def tool_calls(calls, name):
    return [l for l in calls.read_text().splitlines() if l.startswith(name + " ")]


def test_quickstart(fake, capsys):
    run, calls = fake
    assert quickstart.quickstart() == 0
    out = capsys.readouterr().out
    train = tool_calls(calls, "drope-train")
    ok = run / "offset-key"
    assert train == [f"drope-train {quickstart.PRETRAIN} --set run.out_dir={run}/rope",
                     f"drope-train {quickstart.DROPE} --set run.out_dir={run}/drope "
                     f"--set run.init={run}/rope/checkpoints/step-00000300",
                     f"drope-train configs/train/offset-key-rope.yaml --set run.out_dir={ok}/train/rope-s0 "
                     "--set run.name=offset-key-rope-s0 --set run.seed=0",
                     f"drope-train configs/train/offset-key-drope.yaml --set run.out_dir={ok}/train/drope-s0 "
                     f"--set run.name=offset-key-drope-s0 --set run.seed=0 "
                     f"--set run.init={ok}/train/rope-s0/checkpoints/step-00000400"]
    evals = tool_calls(calls, "drope-eval")
    # ppl per method, the plot (no NIAH: the prose models retrieve nothing); offset-key: the temperature fit, RoPE,
    # PI / NTK / YaRN at 2C, 4C, 8C, the crop, DroPE with and without the temperature, the plot; the ppl table
    assert len(evals) == 5 + 1 + (1 + 1 + 9 + 1 + 2 + 1) + 1
    ok_evals = [e for e in evals if "offset-key" in e]
    assert ok_evals[0] == (f"drope-eval fit-temperature --model {ok}/train/drope-s0/checkpoints/step-00000400 "
                           "--task offset-key --multipliers 2,4,8 --queries 256")
    assert ok_evals[1] == (f"drope-eval offset-key --model {ok}/train/rope-s0/checkpoints/step-00000800 --label RoPE "
                           f"--lengths 128,256,512,1024 --queries 1000 --seed 0 --out {ok}/eval/rope-s0")
    assert ok_evals[4] == (f"drope-eval offset-key --model {ok}/train/rope-s0/checkpoints/step-00000800 --rope-scaling "
                           f"pi --factor 8 --label RoPE+PI --lengths 1024 --queries 1000 --seed 0 "
                           f"--out {ok}/eval/rope-pi-s0-L1024")
    assert ok_evals[11] == (f"drope-eval offset-key --model {ok}/train/rope-s0/checkpoints/step-00000800 --crop "
                            f"--label RoPE crop --lengths 128,256,512,1024 --queries 1000 --seed 0 "
                            f"--out {ok}/eval/rope-crop-s0")
    assert "--temperature auto --label DroPE+temp" in ok_evals[12]
    assert "--temperature 0 --label DroPE c=0" in ok_evals[13]
    assert ok_evals[14].startswith(f"drope-eval compare {ok}/eval/rope-s0.json {ok}/eval/rope-pi-s0.json ") and \
        f"drope-c0-s0.json --plot far --out {ok}/far --title" in ok_evals[14]
    assert {p.name for p in (ok / "eval").glob("*-s0.json")} == {
        f"{slug}-s0.json" for slug in ("rope", "rope-pi", "rope-ntk", "rope-yarn", "rope-crop", "drope-temp",
                                       "drope-c0")}
    assert {p.name for p in (run / "eval").glob("*.json")} == {"ppl.json"} | {
        f"{kind}-{slug}{tag}.json" for slug in ("rope", "rope-pi", "rope-ntk", "rope-yarn", "drope")
        for kind, tag in (("ppl", ""),)}
    assert not any(" niah " in e for e in evals)
    assert "RoPE+NTK  L=256  ppl=3.0" in out
    table = (run / "results.md").read_text()
    assert table.startswith("| compare 5 files: Perplexity (held-out split), tiny models trained at C = 256 for 400 "
                            "steps (DroPE: 300 RoPE + 100 recalibration)")
    assert "NIAH" not in table and out.endswith(table)
    assert table.index("| compare 5 files") < table.index("### Offset-key retrieval at C = 128")
    # one seed: the value and the Wilson interval of its queries; no test over seeds, so no claim is decided
    assert "| RoPE+PI | – | 80.0 [76.3, 83.3] | 60.0 [55.6, 64.2] | 20.0 [16.7, 23.7] |" in table
    assert "| DroPE+temp | 90.0 [88.0, 91.7] | 85.0 [81.6, 87.9] | 65.0 [60.7, 69.1] | 25.0 [21.4, 29.0] |" in table
    assert "\nclaim (f) the temperature matters at 4C and 8C (by more than 2 points): inconclusive (DroPE temp " \
        "− c=0 at 4C: one seed: no test over seeds)\n" in table
    assert "1 seed: the value and, where the file has the query counts" in table
    assert [l.split()[0] for l in (run / "timing.txt").read_text().splitlines()] == [
        "corpus", "pretrain", "drope", "ppl", "offset-key-train", "offset-key-eval", "total"]

    calls.write_text("")  # a second run reuses the training runs and the evaluations
    assert quickstart.quickstart() == 0
    out = capsys.readouterr().out
    assert tool_calls(calls, "drope-train") == []
    assert len(tool_calls(calls, "drope-eval")) == 3  # the two plots and the ppl table
    assert f"already trained: {run}/drope/checkpoints/step-00000100" in out
    assert f"RoPE+PI: reusing {run}/eval/ppl-rope-pi.json" in out


def test_quickstart_force_keeps_foreign_files(fake, monkeypatch):
    run, calls = fake
    assert quickstart.quickstart() == 0
    (run / "mine.txt").write_text("keep")
    monkeypatch.setenv("DROPE_FORCE", "1")
    calls.write_text("")
    assert quickstart.quickstart() == 0
    assert len(tool_calls(calls, "drope-train")) == 4 and (run / "mine.txt").read_text() == "keep"


def test_reproduce_reduced(fake, capsys, monkeypatch):
    run, calls = fake
    monkeypatch.setenv("DROPE_REPRO_SCALE", "reduced")
    monkeypatch.setenv("DROPE_REPRO_SEEDS", "2")
    monkeypatch.setenv("DROPE_REPRO_OK_SEEDS", "2")
    assert reproduce.reproduce() == 0
    out = capsys.readouterr().out
    assert (run / "settings.txt").read_text() == ("scale=reduced steps=120 seeds=2 trials=10 drop_at=105 C=256 "
                                                  "ok_seeds=2\n")
    train = tool_calls(calls, "drope-train")
    assert len(train) == 3 * 2 + 2 + 2 * 2 + 1  # offset-key: RoPE, DroPE per seed, NoPE on the first
    assert train[-1].endswith("--set run.name=offset-key-nope-s0 --set run.seed=0 --set model.positional.type=nope")
    fits = [e for e in tool_calls(calls, "drope-eval") if e.startswith("drope-eval fit-temperature")]
    assert len(fits) == 2 + 2 + 1 and sum("--task offset-key" in f for f in fits) == 3
    # RoPE keeps its step-105 checkpoint; DroPE resumes from a copy of it and drops there
    assert train[0].endswith("--set run.name=rope-s0 --set run.seed=0 --set train.steps=120 "
                             "--set model.positional.type=rope --set train.checkpoint_every=105 "
                             "--set train.keep_last=3")
    assert train[1].endswith("--set run.name=drope-s0 --set run.seed=0 --set train.steps=120 "
                             "--set model.positional.type=rope --set drope.drop_at_step=105 --resume")
    assert "/train/drope-s0 " in train[1] and (run / "train" / "drope-s0" / "checkpoints" / "step-00000105").is_dir()
    assert "nope-s0" in train[2]
    assert f"drope seed 0: continues a copy of {run}/train/rope-s0/checkpoints/step-00000105" in out
    assert "== rnope-swa seed 0" in out and "noise" not in out  # training output filtered to step/done lines
    assert len(tool_calls(calls, "drope-analyze")) == 1
    assert sorted(p.name for p in (run / "timing").iterdir()) == ["corpus", "eval", "fig3", "niah", "offset-key-eval",
                                                                  "offset-key-train", "train"]
    text = (run / "REPORT.md").read_text()
    assert "| rope | 2 | 20.50 | 0.71 |" in text and "- drope: c = 0.5" in text and text in out
    # far accuracy: seed bonus 0 and 1 (85 and 86 at 2C): the interval is the Wilson one of the 855 / 1,000 pooled
    # far queries, wider than the bootstrap's [85, 86]
    assert "## 5. Offset-key retrieval" in text
    assert "| DroPE+temp | 90.0 [88.6, 91.2] | 85.5 [83.2, 87.5] | 65.5 [62.5, 68.4] |" in text
    assert "| NoPE+temp (1 seed) | 90.0 [88.0, 91.7] | 85.0 [81.6, 87.9] | 65.0 [60.7, 69.1] |" in text
    assert "\nclaim (a) RoPE collapses beyond C on far needles (falls by more than 10 points): agrees (RoPE C − 4C: " \
        "paired t, H1: mean d > 10, t(1) = " in text
    # RoPE − PI is exactly 0 on both seeds: under the 2-point margin the claim that PI hurts is rejected
    assert "\nclaim (b) PI hurts at 2C (by more than 2 points): disagrees (RoPE − PI at 2C: paired t, H1: " \
        "mean d < 2, t(1) = −∞, p < 1e-300;" in text

    calls.write_text("")
    assert reproduce.reproduce() == 0
    assert tool_calls(calls, "drope-train") == [] and tool_calls(calls, "drope-analyze") == []
    assert not any("fit-temperature" in e or "offset-key --model" in e for e in tool_calls(calls, "drope-eval"))
    assert "rope seed 1: done" in capsys.readouterr().out


def test_reproduce_settings():
    full = reproduce.settings({})
    assert (full.steps, full.seeds, full.trials, full.windows, full.drop_at, full.ok_seeds) == (600, 3, 40, 48, 525, 5)
    assert reproduce.settings({"DROPE_REPRO_SCALE": "reduced"}).ok_seeds == 1
    assert reproduce.settings({"DROPE_REPRO_OK_SEEDS": "5"}).ok_seeds == 5
    r = reproduce.settings({"DROPE_REPRO_SCALE": "reduced", "DROPE_REPRO_STEPS": "80", "DROPE_REPRO_TRIALS": "4"})
    assert (r.steps, r.seeds, r.trials, r.drop_at, r.bias_grad) == (80, 2, 4, 70, ("--seeds", "2", "--seqs", "4"))
    with pytest.raises(ValueError, match="DROPE_REPRO_SCALE must be full or reduced, got 'huge'"):
        reproduce.settings({"DROPE_REPRO_SCALE": "huge"})
    with pytest.raises(ValueError, match="DROPE_REPRO_SEEDS must be a positive integer, got 'x'"):
        reproduce.settings({"DROPE_REPRO_SEEDS": "x"})
    with pytest.raises(ValueError, match="DROPE_REPRO_OK_SEEDS must be a positive integer, got '0'"):
        reproduce.settings({"DROPE_REPRO_OK_SEEDS": "0"})


def test_reproduce_refuses_a_bad_knob(fake, monkeypatch, capsys):
    run, calls = fake
    monkeypatch.setenv("DROPE_REPRO_STEPS", "-5")
    assert reproduce.reproduce() == 2
    assert "DROPE_REPRO_STEPS must be a positive integer, got '-5'" in capsys.readouterr().err
    assert calls.read_text() == "" and not run.exists()


def test_reproduce_side_by_side_matches_one_at_a_time(fake, capsys, monkeypatch):
    """DROPE_REPRO_JOBS=3 runs independent trainings and evaluations side by side: the same tool calls (in another
    order) and the same report as one at a time."""
    run, calls = fake
    monkeypatch.setenv("DROPE_REPRO_SCALE", "reduced")
    monkeypatch.setenv("DROPE_REPRO_OK_SEEDS", "2")
    assert reproduce.reproduce() == 0
    serial_calls, serial_report = calls.read_text().splitlines(), (run / "REPORT.md").read_text()
    capsys.readouterr()

    side = run.with_name("side")
    monkeypatch.setenv("DROPE_RUN_DIR", str(side))
    monkeypatch.setenv("DROPE_REPRO_JOBS", "3")
    calls.write_text("")
    assert reproduce.reproduce() == 0
    out = capsys.readouterr().out
    side_calls = [c.replace(str(side), str(run)) for c in calls.read_text().splitlines()]
    assert sorted(side_calls) == sorted(serial_calls)
    def timeless(text: str) -> str:  # the report's stage times differ from run to run
        return re.sub(r"\d+\.\d min", "T min", text)

    assert timeless((side / "REPORT.md").read_text().replace(str(side), str(run))) == timeless(serial_report)
    assert "[rope+drope s1] == drope seed 1" in out  # lines of a side-by-side task carry its tag


def test_reproduce_runs_nope_on_the_first_offset_key_seed(fake, capsys, monkeypatch):
    run, calls = fake
    monkeypatch.setenv("DROPE_REPRO_SCALE", "reduced")
    monkeypatch.setenv("DROPE_REPRO_OK_SEEDS", "4")
    assert reproduce.reproduce() == 0
    nope = [c for c in tool_calls(calls, "drope-train") if "offset-key-nope" in c]
    assert [c.split("run.seed=")[1].split()[0] for c in nope] == ["0"]
    assert len([c for c in tool_calls(calls, "drope-train") if "run.name=offset-key-rope-s" in c]) == 4
    text = (run / "offset-key" / "results.md").read_text()
    assert "1/4 seeds" in text and "| NoPE+temp (1 seed) |" in text and "| RoPE | " in text
    assert "NoPE 800 (on seed 0) × 4 seeds" in capsys.readouterr().out


def test_drope_seeded_from_the_rope_checkpoint(tmp_path):
    src = tmp_path / "rope" / "checkpoints" / "step-00000105"
    src.mkdir(parents=True)
    (src / "model.safetensors").write_text("weights")
    (src / "state.json").write_text("{}")
    run = tmp_path / "drope"
    (run / "checkpoints" / ".seed-step-00000105.partial").mkdir(parents=True)  # a copy a kill interrupted
    assert driver.seed_from_checkpoint(src, run)
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-00000105"]
    assert (run / "checkpoints" / "step-00000105" / "model.safetensors").read_text() == "weights"
    (src / "model.safetensors").write_text("changed")
    assert not driver.seed_from_checkpoint(src, run)  # a run with a checkpoint is never touched
    assert (run / "checkpoints" / "step-00000105" / "model.safetensors").read_text() == "weights"
    (tmp_path / "x" / "checkpoints" / ".seed-step-00000090.partial").mkdir(parents=True)
    assert not driver.seed_from_checkpoint(tmp_path / "rope" / "checkpoints" / "step-00000090", tmp_path / "x")
    assert not (tmp_path / "x" / "checkpoints").exists() or not any((tmp_path / "x" / "checkpoints").iterdir())


def test_reproduce_drope_from_step_0_beside_an_older_rope_run(fake, capsys, monkeypatch):
    """A finished RoPE run without the drop step's checkpoint (an earlier reproduction's) is reused as it is; its
    DroPE sibling then trains from step 0, and says so."""
    run, calls = fake
    monkeypatch.setenv("DROPE_REPRO_SCALE", "reduced")
    final = run / "train" / "rope-s0" / "checkpoints" / "step-00000120"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_text("")
    (run / "train" / "rope-s0" / "log.jsonl").write_text('{"step": 120, "val_loss": 3.0}\n')
    assert reproduce.reproduce() == 0
    out = capsys.readouterr().out
    assert f"drope seed 0: trains from step 0 ({run}/train/rope-s0/checkpoints/step-00000105 is missing)" in out
    drope = [c for c in tool_calls(calls, "drope-train") if "run.name=drope-s0 " in c]
    assert len(drope) == 1 and not drope[0].endswith("--resume")
    assert not any("run.name=rope-s0 " in c for c in tool_calls(calls, "drope-train"))


@pytest.mark.parametrize("value", ["0", "x", "-1", "257"])
def test_reproduce_refuses_a_bad_jobs_knob(fake, monkeypatch, capsys, value):
    _, calls = fake
    monkeypatch.setenv("DROPE_REPRO_JOBS", value)
    assert reproduce.reproduce() == 2
    assert f"reproduce: DROPE_REPRO_JOBS must be an integer in 1..256, got '{value}'" in capsys.readouterr().err
    assert calls.read_text() == ""


def test_prose_drop_study(fake, capsys, monkeypatch):
    """Per seed one RoPE run keeping every drop point, one DroPE run per share from RoPE's checkpoint at T − S
    with the same budget, ppl of each; the gap per seed, mean and t interval over seeds."""
    run, calls = fake
    out = run.with_name("prose")
    assert prose_drop_study.main(["--out", str(out), "--seeds", "2", "--shares", "12.5,50", "--jobs", "1",
                                  "--bin", str(pathlib.Path(os.environ["DROPE_BUILD_DIR"]))]) == 0
    train = tool_calls(calls, "drope-train")
    assert len(train) == 2 * 3
    assert "--set train.checkpoint_every=50 --set train.keep_last=8" in train[0]
    assert train[1].endswith(f"--set train.steps=50 --set schedule.warmup=5 --set train.log_every=12 "
                             f"--set run.init={out}/train/rope-s0/checkpoints/step-00000350")
    assert f"--set run.init={out}/train/rope-s1/checkpoints/step-00000200" in train[5]
    doc = json.loads((out / "study.json").read_text())
    assert doc["rope"]["ppl_c"]["values"] == [3.0, 3.0] and doc["rope"]["ppl_2c"]["mean"] == 3.5
    # DroPE's ppl at C is 3 + 0.3 (seed 0) and 3 + 0.6 (seed 1): gaps 10 % and 20 %, t(0.975, 1) · 5 = 63.5
    gap = doc["drope"][0]["gap_pct"]
    assert gap["values"] == pytest.approx([10.0, 20.0]) and gap["ci_high"] - 15 == pytest.approx(63.53, abs=0.01)
    assert "| DroPE | 50 % (200) | 3.45 ± 1.91 | 3.95 ± 1.91 | +15.0 ± 63.5 % |" in (out / "study.md").read_text()
    calls.write_text("")
    assert prose_drop_study.main(["--out", str(out), "--seeds", "2", "--shares", "12.5,50", "--jobs", "1",
                                  "--bin", str(pathlib.Path(os.environ["DROPE_BUILD_DIR"]))]) == 0
    assert tool_calls(calls, "drope-train") == [] and tool_calls(calls, "drope-eval") == []  # all reused


@pytest.mark.parametrize("args, message", [
    (["--shares", "0"], "each share must be a percentage in (0, 100), got 0"),
    (["--shares", "0.1"], "0.1 % of 400 steps is 0 recalibration steps"),
    (["--jobs", "0"], "--jobs must be an integer in 1..256, got '0'"),
])
def test_prose_drop_study_refuses_bad_settings(fake, capsys, args, message):
    _, calls = fake
    assert prose_drop_study.main(args) == 1
    assert message in capsys.readouterr().err and calls.read_text() == ""


@pytest.mark.parametrize("args, message", [
    (["--shares", "nan"], "--shares must be a comma list of finite numbers, got 'nan'"),
    (["--shares", "25,inf"], "--shares must be a comma list of finite numbers, got '25,inf'"),
    (["--seeds", "²"], "argument --seeds: expected an integer, got '²'"),
])
def test_prose_drop_study_refuses_bad_arguments_up_front(fake, capsys, args, message):
    _, calls = fake
    with pytest.raises(SystemExit) as e:
        prose_drop_study.main(args)
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert calls.read_text() == ""



def test_offset_key_claims_fits_each_scaled_method_per_length(fake, capsys, monkeypatch, tmp_path):
    run, calls = fake
    monkeypatch.setattr(offset_key_claims, "DOCS", tmp_path / "docs")
    (tmp_path / "docs").mkdir()
    assert offset_key_claims.main(["--out", str(run), "--seeds", "2", "--publish"]) == 0
    out = capsys.readouterr().out
    evals = tool_calls(calls, "drope-eval")
    fits = [e for e in evals if " fit-temperature " in e]
    # DroPE once per seed; PI / NTK / YaRN at 2C, 4C, 8C per seed, each with its scaling, factor and own file
    assert len(fits) == 2 * (1 + 3 * 3)
    rope = f"{run}/train/rope-s2000/checkpoints/step-00000800"
    assert (f"drope-eval fit-temperature --model {rope} --task offset-key --rope-scaling yarn --factor 4 "
            f"--lengths 512 --queries 256 --save {run}/fits/rope-yarn-temp-s2000-L512.json") in fits
    # each +temp evaluation reads the c fitted for its own method, seed and length (here 0.1 × the factor)
    assert (f"drope-eval offset-key --model {rope} --rope-scaling yarn --factor 4 --temperature 0.4 "
            f"--label RoPE+YaRN+temp --lengths 512 --queries 1000 --seed 2000 "
            f"--out {run}/eval/rope-yarn-temp-s2000-L512") in evals
    table = (run / "results.md").read_text()
    for label in ("RoPE+PI+temp", "RoPE+NTK+temp", "RoPE+YaRN+temp", "RoPE crop"):
        assert f"| {label} |" in table
    claim_d = next(l for l in table.splitlines() if l.startswith("claim (d)"))
    assert "not measured" not in claim_d and "inconclusive" not in claim_d
    assert "| RoPE+YaRN+temp | 8C | 0.800 | 0.800 | 0.800 | 2 |" in (run / "fits.md").read_text()
    assert "| DroPE+temp | all (one c) | 0.500 |" in out
    committed = (tmp_path / "docs" / "offset-key-claims.md").read_text()
    assert str(run) not in committed and "### Fitted temperatures" in committed
    calls.write_text("")  # a second run reuses every run, fit and evaluation
    assert offset_key_claims.main(["--out", str(run), "--seeds", "2"]) == 0
    assert tool_calls(calls, "drope-train") == [] and not any(" fit-temperature " in e for e in
                                                              tool_calls(calls, "drope-eval"))


def test_offset_key_claims_refuses_one_seed(fake, capsys):
    with pytest.raises(SystemExit) as e:
        offset_key_claims.main(["--seeds", "1"])
    assert e.value.code == 2 and "--seeds" in capsys.readouterr().err
