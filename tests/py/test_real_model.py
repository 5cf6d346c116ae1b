"""scripts/real_model.sh's table from its step results (the steps themselves: tests/py/test_gguf.py), and
--recalibrate (studies/real_model_recal.py): its plan, argument errors and a 2-step dry path on a tiny GGUF."""
import csv

import pytest

from conftest import BIN, git_repo_with_build
from studies import real_model
from studies import real_model_recal as rr


def test_render_has_every_row():
    summary = {
        "parity": {"tokens": 89, "max_abs_logit_diff": 6e-5, "rel_logit_err": 1.6e-6, "argmax_agreement": 1.0,
                   "greedy_equal": True, "greedy_ours": " He had a long white beard"},
        "niah": {"results": [{"task": "single_1", "length": 2048, "score": 100.0},
                             {"task": "single_1", "length": 4096, "score": 50.0},
                             {"task": "multivalue", "length": 2048, "score": 75.0}]},
        "ppl_rope": {"results": [{"length": 512, "ppl": 32.96}, {"length": 2048, "ppl": 40.04}]},
        "ppl_drope_no_recal": {"results": [{"length": 512, "ppl": 265.5}]},
        "ppl_16k": {"yarn": {"results": [{"length": 16384, "ppl": 51.2}]}},
        "seconds": 229.0,
    }
    md = real_model.render(summary)
    assert "max abs diff 6.00e-05, rel 1.60e-06, argmax agree 100.0 %" in md
    assert "| greedy 24 tokens | identical: \"He had a long white beard\" |" in md
    assert "| single_1 | 100 | 50 |" in md and "| multivalue | 75 | – |" in md
    assert "| as released (RoPE) | 32.96 | 40.04 |" in md and "| DroPE, no recalibration | 265.5 | – |" in md
    assert "| 16K with yarn x2 | 16384: 51.20 |" in md


def test_long_context_methods_are_names_drope_eval_accepts():
    from conftest import run_cli

    help_text = run_cli("drope-eval", "ppl", "--help").stdout
    accepted = help_text.split("--rope-scaling", 1)[1].split("{", 1)[1].split("}", 1)[0].split(",")
    assert set(real_model.LONG_METHODS) <= set(accepted), (real_model.LONG_METHODS, accepted)


# ---- scripts/real_model.sh --recalibrate (studies/real_model_recal.py) --------------------------------------------

def test_recalibrate_rows_plan_and_page_markers():
    s = rr.FULL
    keys = rr.wanted(s)
    assert s.ppl_lengths == (512, 1024, 2048, 4096)  # the length curve at every mark
    assert len(keys) == 2 * len(s.marks) * len(s.ppl_lengths) + 1 + 3 * len(s.niah_lengths) == 47
    assert rr.steps_needed(s, keys) == {"DroPE": 128, "RoPE": 128}
    # the rows of DroPE's curve landed: only the RoPE run and the last mark's evaluations are left
    rows = [{"model": "DroPE", "step": st, "metric": "ppl", "length": n} for st in s.marks for n in s.ppl_lengths]
    todo = rr.missing(s, rows)
    assert rr.steps_needed(s, todo) == {"DroPE": 128, "RoPE": 128}  # NIAH and the fit need DroPE's last checkpoint
    rows += [{"model": "DroPE", "step": 128, "metric": m, "length": n}
             for m, n in [("temperature_c", 2048), ("niah_single_1", 8192), ("niah_single_1", 16384)]]
    assert rr.steps_needed(s, rr.missing(s, rows)) == {"DroPE": 0, "RoPE": 128}
    assert "262,144 tokens" in rr.plan_text(s, []) and "0 of 47 rows" in rr.plan_text(s, [])
    text = rr.DOC_PATH.read_text()
    assert rr.BEGIN in text and rr.END in text
    assert rr.parse_marks("64,16,32") == (0, 16, 32, 64)


def test_recalibrate_page_lists_niah_of_every_step_with_wilson_intervals(tmp):
    """NIAH rows of an earlier last mark stay on the page when more marks are added, each with the Wilson
    interval of its trials (0 of 4 is not "0": it allows up to 49 %); --report rewrites the page from the CSV."""
    rows = [{"model": "DroPE", "step": st, "tokens": st * 2048, "metric": "ppl", "length": 512, "value": v,
             "detail": "", "commit": "abc", "cpu": "cpu"} for st, v in [(0, 350.0), (64, 160.0), (128, 120.0)]]
    rows += [{"model": m, "step": 64, "tokens": 131072, "metric": "niah_single_1", "length": 8192, "value": v,
              "detail": "4 trials", "commit": "abc", "cpu": "cpu"} for m, v in [("DroPE", 0.0), ("RoPE", 75.0)]]
    rows.append({"model": "RoPE+YaRN", "step": 128, "tokens": 262144, "metric": "niah_single_1", "length": 8192,
                 "value": 100.0, "detail": "4 trials, YaRN x2", "commit": "abc", "cpu": "cpu"})
    md = rr.results_md(rr.FULL, rows)
    assert "| DroPE | 64 | 0 [0, 49] (4 trials) |" in md, md
    assert "| RoPE | 64 | 75 [30, 95] (4 trials) |" in md
    assert "| RoPE+YaRN | 128 | 100 [51, 100] (4 trials, YaRN x2) |" in md
    csv_path, doc = tmp / "rows.csv", tmp / "page.md"
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=rr.FIELDS)
        w.writeheader()
        w.writerows(rows)
    doc.write_text(f"before\n{rr.BEGIN}\nold\n{rr.END}\nafter\n")
    assert rr.main(["--report", "--csv", str(csv_path), "--doc", str(doc)]) == 0
    text = doc.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and "old" not in text
    assert "| DroPE | 64 | 0 [0, 49] (4 trials) |" in text
    # the curve beside the CSV: a PNG with DroPE's three points, linked from the page
    png = tmp / "rows.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(results/real-model-recal.png)" in text


def test_rows_from_a_dirty_build_are_computed_again_and_replaced(tmp):
    """A row whose commit ends in -dirty cannot be reproduced from a commit: it counts as missing, and the row
    computed from a clean commit replaces it (one row a key, the other rows untouched)."""
    s = rr.FULL
    row = {"model": "DroPE", "step": 16, "tokens": 32768, "metric": "ppl", "length": 512, "value": 176.0,
           "detail": "", "commit": "7e5f49b-dirty", "cpu": "cpu"}
    clean = dict(row, step=32, tokens=65536, commit="abc1234")
    assert rr.key("DroPE", 16, "ppl", 512) in rr.missing(s, [row, clean])
    assert rr.key("DroPE", 32, "ppl", 512) not in rr.missing(s, [row, clean])
    path = tmp / "rows.csv"
    rr.append_row(path, row)
    rr.append_row(path, clean)
    rr.append_row(path, dict(row, value=170.5, commit="def5678"))
    got = rr.read_rows(path)
    assert [(r["step"], r["value"], r["commit"]) for r in got] == [(32, 176.0, "abc1234"), (16, 170.5, "def5678")]


def test_a_clean_tree_runs_a_copy_of_the_tools(tmp):
    """Rows of a clean tree name its commit and come from a copy of the tools (rebuilding build/ later cannot
    change them); a dirty tree runs build/ itself and its rows say -dirty."""
    repo, build = git_repo_with_build(tmp, (*rr.TOOLS, rr.MODULES[0]))
    tools, commit = rr.tools_and_commit(build, tmp / "out", repo)
    assert tools == tmp / "out" / "bin" / commit and not commit.endswith("-dirty")
    assert sorted(p.name for p in tools.iterdir()) == sorted((*rr.TOOLS, rr.MODULES[0]))
    (repo / "src" / "a.cpp").write_text("int b;\n")
    tools, commit = rr.tools_and_commit(build, tmp / "out", repo)
    assert tools == build and commit.endswith("-dirty")


def test_window_reading_follows_the_numbers():
    val = {rr.key("DroPE", 8, "ppl", n): v for n, v in [(512, 150.0), (1024, 151.0), (2048, 152.0)]}
    val.update({rr.key("RoPE", 8, "ppl", n): v for n, v in [(512, 36.0), (1024, 33.0), (2048, 34.0)]})
    assert "DroPE does not use context beyond 512 tokens yet" in rr.window_reading(val, "DroPE", 8)
    text = rr.window_reading(val, "RoPE", 8)
    assert "falls with longer windows up to 1,024 tokens" in text and "do not lower it further (2,048)" in text
    assert rr.window_reading(val, "RoPE", 16) is None  # no rows at that step


@pytest.mark.parametrize("args, needle", [
    (["--marks", "a,b"], "--marks must be a comma list"),
    (["--marks", "0"], "--marks must hold steps"),
    (["--lr", "2"], "--lr must be in (0, 1)"),
    (["--niah-trials", "0"], "--niah-trials must be in 1..1000"),
    (["--niah-lengths", "4"], "--niah-lengths must hold lengths"),
    (["--commit"], "unrecognized arguments: --commit"),
    (["--gguf", "/no/such/model.gguf"], "no such file"),
])
def test_recalibrate_argument_errors(args, needle, capsys):
    with pytest.raises(SystemExit) as e:
        rr.main(["--plan", *args])
    assert e.value.code == 2 and needle in capsys.readouterr().err


def test_the_recalibration_is_its_own_study(capsys):
    """scripts/real_model.sh --recalibrate runs studies/real_model_recal.py; real_model itself names it."""
    with pytest.raises(SystemExit) as e:
        real_model.main(["--recalibrate", "--plan"])
    assert e.value.code == 2 and "bash studies/run.sh real_model_recal" in capsys.readouterr().err


def test_recalibrate_dry_path_on_a_tiny_gguf(tmp):
    """Both runs 2 steps, perplexity at every mark, the fit and NIAH: every stage once, then a second call that
    finds every row and computes nothing."""
    from test_gguf import bpe_meta, bpe_tokenizer, tiny_model, to_gguf

    if not (BIN / "drope-train").is_file():
        pytest.skip("needs the build")
    tok = bpe_tokenizer()
    to_gguf(tiny_model("llama", True, vocab=tok.get_vocab_size()), tmp / "tiny.gguf", "llama",
            tokenizer_meta=bpe_meta(tok))
    text = " ".join(f"The quick brown fox number {i} jumps over the lazy dog and rests." for i in range(300))
    (tmp / "train").mkdir()
    for k in range(10):
        (tmp / "train" / f"doc{k}.txt").write_text(text)
    (tmp / "heldout.txt").write_text(text)
    args = ["--dry-run", "--gguf", str(tmp / "tiny.gguf"), "--train-text", str(tmp / "train"), "--heldout",
            str(tmp / "heldout.txt"), "--out", str(tmp / "out"), "--bin", str(BIN)]
    assert rr.study(args) == 0
    rows = rr.read_rows(tmp / "out" / "rows.csv")
    assert len(rows) == len(rr.wanted(rr.DRY)) == 16
    assert {(r["model"], r["step"]) for r in rows if r["metric"] == "ppl"} == {
        (m, st) for m in rr.MODELS for st in (0, 1, 2)}
    assert all(r["value"] > 0 for r in rows if r["metric"] == "ppl")
    assert [r["tokens"] for r in rows if r["model"] == "DroPE" and r["metric"] == "ppl"] == [0, 0, 64, 64, 128, 128]
    assert (tmp / "out" / "train" / "drope" / "checkpoints" / "step-00000002" / "temperature.json").is_file()
    summary = (tmp / "out" / "summary.md").read_text()
    assert "| DroPE | " in summary and "(1 trials, fitted temperature) |" in summary
    before = (tmp / "out" / "rows.csv").read_text()
    assert rr.study(args) == 0 and (tmp / "out" / "rows.csv").read_text() == before
