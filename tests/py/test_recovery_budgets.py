"""studies/recovery_budgets.py on a synthetic study directory: the schedules it reads, the pre-registered tests,
Holm over the family, the comparisons' verdicts and the readings, partial studies."""
import json

import pytest

from drope_scripts import recovery as rs
from drope_scripts import stats
from studies import recovery_budgets as rb

C = 128


def write_eval(path, seed, acc, far):
    rows = [{"length": C, "accuracy": acc, "correct": round(10 * acc), "queries": 1000, "far_accuracy": None}]
    rows += [{"length": m * C, "accuracy": far, "correct": round(10 * far), "queries": 1000, "far_accuracy": far,
              "far_correct": round(5 * far), "far_queries": 500} for m in (2, 4, 8)]
    path.write_text(json.dumps({"schema": "drope.results", "schema_version": 1, "kind": "offset-key", "seed": seed,
                                "index_split": "heldout", "train_length": C, "results": rows}))


def make_study(tmp, accs, seeds=range(10), scratch=None):
    """accs: schedule → per-seed accuracy at C (far = the same); RoPE at 100 in every seed."""
    out = tmp / "study"
    (out / "eval").mkdir(parents=True)
    (out / "settings.json").write_text(json.dumps({"steps": 800, "queries": 1000, "multipliers": [1, 2, 4, 8],
                                                   "temperature": "auto", "fit_queries": 128}))
    for s in seeds:
        write_eval(out / "eval" / f"rope-s{s}-heldout.json", s, 100.0, 0.0)
        for name, values in accs.items():
            write_eval(out / "eval" / f"drope-{rb.recipe(name).slug}-s{s}-heldout.json", s, values[s], values[s])
        for name, values in (scratch or {}).items():
            write_eval(out / "eval" / f"{name}-s{s}-heldout.json", s, values[s], values[s] / 2)
    return out


LENGTH_DECIDES = {"400+100": [30, 28, 99, 35, 27, 26, 31, 29, 28, 33],
                  "400+200": [100, 60, 99, 52, 100, 50, 100, 48, 100, 55],
                  "400+400": [99.9, 100, 100, 99.9, 100, 100, 99.8, 100, 100, 100],
                  "600+400": [100, 99.9, 100, 100, 99.8, 100, 100, 100, 99.9, 100],
                  "700+400": [100, 100, 99.9, 100, 100, 99.9, 100, 100, 100, 99.8],
                  "600+200": [100, 58, 99, 52, 100, 50, 100, 47, 100, 55],
                  "700+100": [27, 30, 98, 34, 25, 25, 33, 29, 29, 33]}


def test_schedules_are_the_study_recipes():
    assert rb.recipe("400+400").slug == "lr3e-03-wu10-normqk-r50"
    assert rb.recipe("700+100").slug == "lr3e-03-wu10-normqk-r12p5"
    assert rb.recipe("600+400").slug == "lr3e-03-wu10-normqk-d600n400"
    assert [(rb.recipe(n).start(800), rb.recipe(n).steps(800)) for n in rb.SCHEDULES] == list(rb.SCHEDULES.values())


def test_the_length_decides_when_only_the_length_matters(tmp):
    study = make_study(tmp, LENGTH_DECIDES)
    text, doc = rb.report(study, 10)
    assert len(doc["family1"]) == 26 and all(r["n"] == 10 for r in doc["family1"])
    assert doc["comparisons"]["L2"] == doc["comparisons"]["L3"] == stats.AGREES
    assert doc["comparisons"]["E1"] == doc["comparisons"]["E2"] == stats.AGREES
    assert all(doc["comparisons"][c] == stats.INCONCLUSIVE for c in ("D1", "D2", "D3", "D4", "D5"))
    assert doc["readings"] == {"the recalibration length decides": stats.AGREES,
                               "dropping earlier helps, at a fixed length": stats.INCONCLUSIVE}
    # Holm: the adjusted p of every test is at least its own and the family is monotone in the raw p
    rows = sorted(doc["family1"], key=lambda r: r["p"])
    assert all(r["p_holm"] >= r["p"] for r in rows)
    assert [r["p_holm"] for r in rows] == sorted(r["p_holm"] for r in rows)
    l3 = next(r for r in doc["family1"] if r["id"] == "L3" and r["measure"] == "recovered seeds")
    assert l3["numbers"] == "400+400 10/10, 400+100 1/10"
    assert l3["p"] == pytest.approx(stats.fisher_exact(10, 10, 1, 10, "greater").p)
    assert "| 400+100 | 500 | 10 | 1/10" in text and "| 700+400 | 1100 | 10 | 10/10" in text
    assert "| 400+400 | 10/10 | 10/10 |" in text  # against the committed first stage


def test_an_earlier_drop_helps_and_partial_studies(tmp):
    accs = dict(LENGTH_DECIDES)
    accs["700+400"] = [50, 48, 52, 49, 51, 47, 50, 53, 46, 50]
    study = make_study(tmp, accs)
    _, doc = rb.report(study, 10)
    assert doc["comparisons"]["D3"] == doc["comparisons"]["D2"] == stats.AGREES
    assert doc["comparisons"]["E2"] == stats.DISAGREES
    assert doc["readings"]["dropping earlier helps, at a fixed length"] == stats.AGREES
    assert doc["readings"]["the recalibration length decides"] == stats.INCONCLUSIVE
    # a later drop that is better: the comparison disagrees
    assert rb.comparison_verdict([stats.DISAGREES, stats.INCONCLUSIVE]) == stats.DISAGREES
    assert rb.comparison_verdict([stats.DISAGREES, stats.AGREES]) == stats.INCONCLUSIVE
    # one seed: no test, inconclusive; the tables say how many seeds
    one = make_study(tmp / "one", LENGTH_DECIDES, seeds=[0])
    _, doc = rb.report(one, 10)
    assert all(r["verdict"] == stats.INCONCLUSIVE and r["n"] == 1 and r["test"] is None for r in doc["family1"])
    assert doc["seeds"]["400+100"] == [0]


def test_schemes_from_scratch(tmp):
    scratch = {"alibi": [100.0, 99.5, 99.8, 100.0, 99.9, 100, 100, 100, 100, 100], "rnope-swa": [60.0] * 10}
    study = make_study(tmp, LENGTH_DECIDES, scratch=scratch)
    text, doc = rb.report(study, 10)
    f2 = {r["id"]: r for r in doc["family2"]}
    assert f2["B1"]["verdict"] == f2["B2"]["verdict"] == stats.AGREES  # far 8C: DroPE 100 against 50 and 30
    assert f2["B3"]["verdict"] == stats.AGREES and f2["B4"]["verdict"] == stats.DISAGREES
    assert "| ALiBi (scratch) | 800 | 10 | 10/10" in text


def test_refusals(tmp, capsys):
    with pytest.raises(SystemExit) as e:
        rb.main(["--study", str(tmp / "none")])
    assert e.value.code == 2 and "--study" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        rb.main(["--seeds", "1"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "--seeds" in err and len(err.strip().splitlines()) == 1
    (tmp / "empty").mkdir()
    assert rb.main(["--study", str(tmp / "empty")]) == 1
    assert "settings.json" in capsys.readouterr().err
    assert rs.TOLERANCE == rb.MARGIN
