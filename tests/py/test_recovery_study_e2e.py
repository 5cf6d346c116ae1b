"""studies/recovery_study.py end to end on a tiny study (8 training steps per run, two workers on
one directory): held-out evaluations for the selection seeds only, test evaluations for the fresh seeds only, the
report, reuse on a second run. About 21 tool runs, 53-83 s measured on 2 shared cores: ctest labels it slow
(ctest -LE slow skips it)."""
import json
import os
import subprocess
import sys

from conftest import BIN, ROOT
from studies.recovery_study import HELDOUT, TEST


def run_study(out, *extra, check=True):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=f"{ROOT / 'scripts'}:{ROOT}")
    args = [sys.executable, "-m", "studies.recovery_study", "--out", out, "--bin", BIN, *extra]
    r = subprocess.run([str(a) for a in args],
                       capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    if check and r.returncode != 0:
        raise AssertionError(f"exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


TINY = ("--steps", 8, "--seeds", 2, "--confirm-seeds", 1, "--lrs", "1e-3", "--warmups", "0.25", "--qk-norms", "qk",
        "--shares", "25,50", "--multipliers", "1,2", "--queries", 8, "--fit-queries", 8, "--poll", "0.2")


def test_tiny_study_end_to_end(tmp):
    out = tmp / "study"
    run_study(out, *TINY, "--jobs", 2)
    doc = json.loads((out / "study.json").read_text())
    assert doc["kind"] == "offset-key-recovery-study"
    sel, conf = doc["selection"], doc["confirmation"]
    assert sel["split"] == HELDOUT and sel["seeds"] == [0, 1] and len(sel["ranking"]) == 2
    assert sel["selected"] == sel["ranking"][0]["recipe"]
    assert conf["split"] == TEST and conf["seeds"] == [1000] and conf["recipe"] == sel["selected"]
    assert conf["n"] == 1 and 0 <= conf["wilson_low"] <= conf["rate"] <= conf["wilson_high"] <= 1
    assert doc["settings"]["rope_checkpoint_every"] == 2  # drop steps 6 and 4 of 8
    for f in (out / "eval").glob("*.json"):
        split = json.loads(f.read_text())["index_split"]
        seed = int(f.stem.split("-s")[-1].split("-")[0])
        assert split == (TEST if seed >= 1000 else HELDOUT), f.name
        assert f.stem.endswith(split)
    names = {f.name for f in (out / "eval").glob("*.json")}
    assert len(names) == 2 + 2 * 2 + 2  # RoPE and 2 recipes × 2 selection seeds; RoPE and the chosen, 1 fresh seed
    assert sum("-s1000-" in n for n in names) == 2
    # the RoPE run kept the checkpoints the drop steps need
    assert {p.name for p in (out / "train" / "rope-s0" / "checkpoints").iterdir()} >= {
        "step-00000004", "step-00000006", "step-00000008"}
    text = (out / "study.md").read_text()
    assert "Selection protocol" in text and "--split heldout" in text and "(selected)" in text
    assert "has not learned the task" in text  # 8 steps teach RoPE nothing: the report says so
    lines = (out / "study.csv").read_text().splitlines()
    assert lines[0].startswith("phase,split,recipe") and len(lines) == 1 + 4 + 1
    # resumed: nothing recomputed
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "eval").glob("*.json")}
    r = run_study(out, *TINY)
    assert "done in" not in r.stdout
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (out / "eval").glob("*.json")}
    # without confirmation seeds the report says it holds held-out numbers only
    no_conf = list(TINY)
    no_conf[no_conf.index("--confirm-seeds") + 1] = 0
    r = run_study(out, *no_conf)
    assert "done in" not in r.stdout
    text = (out / "study.md").read_text()
    assert "3. No confirmation here (--confirm-seeds 0)" in text and "fresh seeds " not in text
    assert "## Confirmation\n\nNo confirmation seeds (--confirm-seeds 0)." in text
    # another budget on the same directory is refused
    r = run_study(out, *TINY[:-2], "--steps", 16, check=False)
    assert r.returncode == 1 and "settings.json" in r.stderr and "use another --out" in r.stderr


def test_tiny_schedules_and_schemes_from_scratch(tmp):
    """--drops off the budget and --scratch: DroPE from the named step for the named steps, ALiBi and RNoPE-SWA
    trained for the budget and scored at every length, their rows in the report and the CSV."""
    out = tmp / "budgets"
    run_study(out, "--steps", 8, "--seeds", 1, "--confirm-seeds", 0, "--lrs", "3e-3", "--warmups", "0.25",
              "--qk-norms", "qk", "--drops", "4:2,6:2", "--multipliers", "1,2", "--queries", 8, "--fit-queries", 8,
              "--scratch", "alibi,rnope-swa", "--poll", "0.2")
    doc = json.loads((out / "study.json").read_text())
    assert [(g["drop_step"], g["drope_steps"], g["budget"]) for g in doc["grid"]] == [(4, 2, 6), (6, 2, 8)]
    assert doc["grid"][1]["slug"].endswith("-r25") and doc["grid"][0]["slug"].endswith("-d4n2")
    assert doc["settings"]["rope_checkpoint_every"] == 2
    cfg = (out / "train" / f"drope-{doc['grid'][0]['slug']}-s0" / "config.yaml").read_text()
    assert "step-00000004" in cfg and "steps: 2" in cfg
    assert set(doc["scratch"]["summary"]) == {"alibi", "rnope-swa"} and doc["scratch"]["seeds"] == [0]
    for name in ("alibi", "rnope-swa"):
        res = json.loads((out / "eval" / f"{name}-s0-{HELDOUT}.json").read_text())
        assert sorted(r["length"] for r in res["results"]) == [128, 256]
        assert (out / "train" / f"{name}-s0" / "checkpoints" / "step-00000008").is_dir()
    text = (out / "study.md").read_text()
    assert "2 from step 4 (budget 6)" in text and "## From scratch" in text and "| RNoPE-SWA |" in text
    lines = (out / "study.csv").read_text().splitlines()
    assert lines[0].endswith(",budget") and len(lines) == 1 + 2 + 2
    assert sum(l.startswith("scratch,heldout,alibi,") for l in lines) == 1
