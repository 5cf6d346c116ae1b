"""The run config's settings are declared once (src/train/settings.cpp): docs/training.md's generated tables,
drope-train --help and `drope-train settings` all come from that table. A doc that disagrees with the binary
fails here; `build/drope-train settings --doc docs/training.md` regenerates it."""
import re

from conftest import ROOT, expect_error, run_cli

DOC = ROOT / "docs" / "training.md"
SECTIONS = ("train-settings", "resume-settings")


def section(text, name):
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1, f"{name}: one pair of markers expected"
    return text.split(begin, 1)[1].split(end, 1)[0]


def table_keys(markdown):
    return re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", section(markdown, "train-settings"), flags=re.M)


def test_docs_tables_are_the_generated_ones():
    generated = run_cli("drope-train", "settings", "--markdown").stdout
    doc = DOC.read_text(encoding="utf-8")
    for name in SECTIONS:
        assert section(doc, name) == section(generated, name), (
            f"docs/training.md's {name} table differs from the settings table: run "
            f"build/drope-train settings --doc docs/training.md")
    keys = table_keys(generated)
    assert len(keys) > 60 and len(set(keys)) == len(keys)
    for key in ("train.steps", "train.cuda_graphs", "optim.fused", "eval.niah_seed", "schedule.decay_shape"):
        assert key in keys


def test_help_and_settings_list_every_key():
    keys = table_keys(run_cli("drope-train", "settings", "--markdown").stdout)
    help_text = run_cli("drope-train", "--help").stdout
    footer = help_text[help_text.index("Settings ("):]
    listing = run_cli("drope-train", "settings").stdout
    for key in keys:
        assert re.search(rf"\b{key.split('.', 1)[1]}\b", footer), key
        assert re.search(rf"^{re.escape(key)}  \(", listing, flags=re.M), key
    # What --resume may change: the resume table lists every free key, and nothing it lists is refused.
    resume = section(DOC.read_text(encoding="utf-8"), "resume-settings")
    for key in ("train.steps", "train.shard", "optim.lr", "drope.drop_at_step", "data.text", "eval.lengths"):
        assert f"`{key}`" in resume.split("Refused:")[0], key
    for key in ("run.seed", "data.seq_len", "train.dtype"):
        assert f"`{key}`" in resume.split("Refused:")[1], key


def test_doc_is_rewritten_between_its_markers(tmp):
    page = tmp / "training.md"
    text = DOC.read_text(encoding="utf-8")
    for name in SECTIONS:
        old = section(text, name)
        text = text.replace(old, "\nstale\n")
    page.write_text(text, encoding="utf-8")
    run_cli("drope-train", "settings", "--doc", page)
    assert page.read_text(encoding="utf-8") == DOC.read_text(encoding="utf-8")
    bare = tmp / "bare.md"
    bare.write_text("# no tables here\n", encoding="utf-8")
    expect_error(run_cli("drope-train", "settings", "--doc", bare, check=False), str(bare), "train-settings:begin")
    assert bare.read_text(encoding="utf-8") == "# no tables here\n"
    expect_error(run_cli("drope-train", "settings", "--set", "train.steps=3", check=False),
                 "drope-train settings takes --markdown and --doc only")
