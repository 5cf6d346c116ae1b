"""The numbers the docs quote from the committed CSVs (scripts/drope_scripts/doc_numbers.py): every generated
section of README.md and docs/ equals what its CSV gives now, a changed CSV row makes the check fail, rows from a
dirty build are labelled, and no hand-typed p-value or verdict is left outside the generated sections."""
import re

import pytest

from drope_scripts import doc_numbers as dn
from drope_scripts import study
from drope_scripts.driver import ROOT


@pytest.fixture(scope="module")
def generated():
    return dn.generate()


@pytest.mark.parametrize("page, name", [(p, n) for p, n, _ in dn.SECTIONS])
def test_every_page_agrees_with_its_csv(generated, page, name):
    assert study.section_of(ROOT / page, name) == generated[page, name].strip("\n"), (
        f"{page}: section {name} is stale: run `cd scripts && ../.venv/bin/python -m drope_scripts.doc_numbers`")


def test_a_changed_csv_row_is_caught(tmp_path, monkeypatch):
    """The check can fail: one per-seed value of the claims CSV moved, and the README's table no longer matches."""
    text = dn.CLAIMS_CSV.read_text(encoding="utf-8")
    row = next(l for l in text.splitlines() if l.startswith("RoPE,512,far_accuracy,"))
    values = row.rsplit(",", 1)[1].split()
    moved = row.rsplit(",", 1)[0] + "," + " ".join(["0"] + values[1:])
    fake = tmp_path / "offset-key-claims.csv"
    fake.write_text(text.replace(row, moved), encoding="utf-8")
    monkeypatch.setattr(dn, "CLAIMS_CSV", fake)
    assert study.section_of(ROOT / "README.md", "headline") != dn.readme_headline()


def test_dirty_rows_are_labelled_not_cited_as_reproducible(generated):
    assert study.dirty_note(["abc", "def"]) == ""
    assert study.dirty_note(["abc-dirty", "def"]) == ("1 of 2 rows from a dirty build (commit ending in -dirty), "
                                                      "not reproducible from a commit")
    _, ps, rr, _ = dn._studies()
    for rows, key in ((ps.read_rows(ps.CSV_PATH), ("docs/results/prose-sweep.md", "prose-sweep")),
                      (rr.read_rows(rr.CSV_PATH), ("docs/real-model.md", "real-model-recal"))):
        note = study.dirty_note([r["commit"] for r in rows])
        assert note and note in generated[key]
    readme = generated["README.md", "headline"]
    assert readme.count("not reproducible from a commit") == 2  # the prose sweep and the real model
    # a paragraph built on dirty rows leads with that: exploratory, not evidence, before any number
    for para in readme.split("\n\n"):
        if "not reproducible from a commit" in para:
            assert para.startswith("**Exploratory, not evidence** ("), para[:80]


def test_no_hand_typed_p_value_or_verdict_outside_the_generated_sections():
    """README's headline: every p-value and bold verdict lies inside a generated section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    outside = re.sub(r"<!-- (\S+):begin -->.*?<!-- \1:end -->", "", text, flags=re.S)
    assert not re.search(r"\bp [=<] ?\d", outside)
    assert not re.search(r"\*\*(agrees|disagrees|inconclusive|saturated)", outside)
    headline = outside.split("## Headline", 1)[1].split("## Documentation", 1)[0]
    assert not re.search(r"\d+ %", headline.replace("95 % interval", ""))  # a result in percent, typed by hand


def test_the_width_line_has_no_verdict_until_the_study_is_complete(generated):
    _, _, _, ws = dn._studies()
    rows = ws.table().read()
    line = dn.width_line()
    assert f"of {len(ws.registered())} rows" in line and line in generated["README.md", "headline"]
    assert ("no verdict yet" in line) == (not ws.complete(rows))


def test_the_real_model_is_read_without_extrapolation(generated):
    text = generated["docs/real-model.md", "real-model-recal"]
    _, _, rr, _ = dn._studies()
    rows = [r for r in rr.read_rows(rr.CSV_PATH) if r["metric"] == "ppl" and r["model"] == "DroPE"]
    last = max(r["step"] for r in rows if sum(q["step"] == r["step"] for q in rows) >= 2)
    at_last = {r["length"]: r["value"] for r in rows if r["step"] == last}
    shortest = min(at_last)
    # the page's reading follows the numbers: "does not use" exactly when the shortest window is the best one
    assert (f"DroPE does not use context beyond {shortest:,} tokens yet" in text) == (
        min(at_last, key=at_last.get) == shortest), (at_last, text)
    assert "cannot say where either curve ends" in text and "5B tokens" in text
