"""The train / evaluate driver quickstart and reproduce share (scripts/drope_scripts/driver.py), with fake tools."""
import json
import os
import re
import shutil

import pytest

from conftest import BIN, micro_train_yaml
from drope_scripts import driver
from drope_scripts.driver import Driver, Method


def fake_checkpoint(run_dir, step, complete=True):
    d = driver.checkpoint(run_dir, step)
    d.mkdir(parents=True)
    if complete:
        (d / "model.safetensors").write_bytes(b"")
    return d


def test_train_state(tmp_path):
    run = tmp_path / "run"
    assert driver.train_state(run, 600) == "fresh"
    (run / "checkpoints").mkdir(parents=True)
    (run / "log.jsonl").write_text("")
    assert driver.train_state(run, 600) == "fresh"  # a first attempt killed before its first checkpoint
    fake_checkpoint(run, 150)
    assert driver.train_state(run, 600) == "killed"
    fake_checkpoint(run, 600, complete=False)  # the final one being written
    assert driver.train_state(run, 600) == "killed"
    (driver.checkpoint(run, 600) / "model.safetensors").write_bytes(b"")
    assert driver.train_state(run, 600) == "finished"
    assert driver.checkpoint(run, 600).name == "step-00000600"


@pytest.fixture
def tools(tmp_path):
    """A bin directory whose drope-train / drope-eval record their arguments (one line each) and print a little."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "calls.txt"
    for name in ("drope-train", "drope-eval"):
        tool = bin_dir / name
        tool.write_text(f'#!/bin/sh\necho "{name} $*" >>"{calls}"\necho "step 1 | loss 7"\necho "noise"\n'
                        'echo "done"\nexit "${FAKE_RC:-0}"\n')
        tool.chmod(0o755)
    return bin_dir, calls


def test_train_fresh_killed_finished(tools, tmp_path, capsys):
    bin_dir, calls = tools
    d = Driver("test", bin_dir, width=3)
    run = tmp_path / "runs" / "rope"
    run.mkdir(parents=True)
    (run / "notes.txt").write_text("mine")
    assert d.train("cfg.yaml", run, 600, ["run.seed=1"], fresh_overrides=["run.init=x"]) == "fresh"
    head = f"drope-train cfg.yaml --set run.out_dir={run} --set run.seed=1"
    assert calls.read_text().splitlines()[-1] == f"{head} --set run.init=x"
    assert (run / "notes.txt").read_text() == "mine"  # nothing deleted
    fake_checkpoint(run, 150)
    assert d.train("cfg.yaml", run, 600, ["run.seed=1"], fresh_overrides=["run.init=x"]) == "killed"
    assert calls.read_text().splitlines()[-1] == f"{head} --set run.init=x --resume"  # the same settings
    fake_checkpoint(run, 600)
    assert d.train("cfg.yaml", run, 600) == "finished"
    assert len(calls.read_text().splitlines()) == 2
    assert driver.checkpoint(run, 150).is_dir()


def test_killed_drope_run_resumes_with_real_tool(tmp_path):
    """A DroPE run (run.init set by the caller, not its config) killed after a checkpoint resumes: drope-train
    refuses a resume whose run.init differs from the checkpoint's, so the driver must pass it again."""
    rope = tmp_path / "rope"
    cfg = tmp_path / "rope.yaml"
    cfg.write_text(micro_train_yaml(rope, 2).replace("log_every: 1,", "log_every: 1, eval_every: 0,"))
    d = Driver("test", BIN, width=3)
    assert d.train(cfg, rope, 2, show=driver.NONE) == "fresh"
    init = driver.checkpoint(rope, 2)
    drope = tmp_path / "drope"
    dcfg = tmp_path / "drope.yaml"
    elsewhere = tmp_path / "elsewhere"  # the config's own run.init, which the caller overrides
    dcfg.write_text(micro_train_yaml(drope, 4).replace("seed: 5}", f"seed: 6, phase: drope, init: {elsewhere}}}")
                    .replace("log_every: 1,", "log_every: 1, eval_every: 0, checkpoint_every: 2,"))
    sets = ["train.keep_last=2"]
    assert d.train(dcfg, drope, 4, sets, [f"run.init={init}"], show=driver.NONE) == "fresh"
    final = driver.checkpoint(drope, 4)
    shutil.rmtree(final)  # killed before its last checkpoint
    assert d.train(dcfg, drope, 4, sets, [f"run.init={init}"], show=driver.NONE) == "killed"
    assert (final / "model.safetensors").is_file()


def test_tool_output_filters_and_failure(tools, tmp_path, capsys, monkeypatch):
    bin_dir, _ = tools
    d = Driver("test", bin_dir, width=3)
    d.tool("drope-eval", "x", show=re.compile(r"^(step|done)"))
    assert capsys.readouterr().out == "step 1 | loss 7\ndone\n"
    d.tool("drope-eval", "x", show=2)
    assert capsys.readouterr().out == "noise\ndone\n"
    d.tool("drope-eval", "x", show=driver.NONE)
    assert capsys.readouterr().out == ""
    monkeypatch.setenv("FAKE_RC", "3")
    with pytest.raises(driver.ToolError, match="drope-eval exited 3") as e:
        d.tool("drope-eval", "x", show=driver.NONE)
    assert e.value.returncode == 3
    with pytest.raises(driver.ToolError, match=r"^drope-train exited 3$"):  # also when run through stdbuf
        d.train("cfg.yaml", tmp_path / "r", 10, show=driver.NONE)
    assert driver.run_pipeline("test", lambda: d.tool("drope-train", show=driver.NONE)) == 3
    assert "test: drope-train exited 3" in capsys.readouterr().err


def test_evaluate_reuses_a_valid_result_and_checks_its_kind(tools, tmp_path):
    bin_dir, calls = tools
    d = Driver("test", bin_dir, width=3)
    m = Method("RoPE+PI", tmp_path / "model", ("--rope-scaling", "pi", "--factor", "2"))
    assert m.slug == "rope-pi"
    out = tmp_path / "eval" / f"ppl-{m.slug}"
    out.parent.mkdir()
    with pytest.raises(driver.results.ResultsError, match="cannot read"):  # the fake tool writes nothing
        d.evaluate("ppl", m, out, ("--lengths", 256), "ppl")
    assert calls.read_text().split() == ["drope-eval", "ppl", "--model", str(m.model), "--rope-scaling", "pi",
                                         "--factor", "2", "--label", "RoPE+PI", "--lengths", "256", "--out", str(out)]
    (tmp_path / "eval" / "ppl-rope-pi.json").write_text(json.dumps({"kind": "ppl", "summary": {"ppl@256": 3.0}}))
    doc, computed = d.evaluate("ppl", m, out, ("--lengths", 256), "ppl")
    assert not computed and doc["summary"] == {"ppl@256": 3.0}
    assert len(calls.read_text().splitlines()) == 1
    with pytest.raises(driver.results.ResultsError, match="expected 'niah'"):
        d.evaluate("niah", m, out, (), "niah")


def test_config_steps(tmp_path):
    root = driver.ROOT / "configs" / "train"
    assert driver.config_steps(root / "quickstart-pretrain-rope.yaml") == 400
    assert driver.config_steps(root / "quickstart-drope.yaml") == 100
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  # steps: 5\n  log_every: 1\n  steps:   40   # trailing comment\n")
    assert driver.config_steps(p) == 40
    for bad in ("train: {}\n", "train:\n  steps: 0\n", "train:\n  steps: many\n", "- 1\n"):
        p.write_text(bad)
        with pytest.raises(ValueError, match=r"train\.steps must be a positive integer"):
            driver.config_steps(p)


def test_remove_outputs_removes_only_the_pipelines_files(tmp_path):
    run = tmp_path / "run"
    for f in ("rope/checkpoints/x", "eval/ppl-rope.json", "results-ppl.md", "results.md", "keep/me", "keep.txt"):
        (run / f).parent.mkdir(parents=True, exist_ok=True)
        (run / f).write_text("")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "data").write_text("")
    os.symlink(tmp_path / "elsewhere", run / "drope")
    os.symlink(tmp_path / "gone", run / "results-ppl.json")
    driver.remove_outputs(run, ("rope", "drope", "eval", "results.md", "results-ppl.*"))
    assert sorted(p.name for p in run.iterdir()) == ["keep", "keep.txt"]
    assert (tmp_path / "elsewhere" / "data").is_file()  # a link is removed, not followed
    driver.remove_outputs(tmp_path / "absent", ("*",))


def test_concat_tables(tmp_path):
    (tmp_path / "a.md").write_text("| a |\n")
    (tmp_path / "b.md").write_text("| b |\n")
    text = driver.concat_tables([tmp_path / "a.md", tmp_path / "b.md"], tmp_path / "all.md")
    assert text == (tmp_path / "all.md").read_text() == "| a |\n\n| b |\n"
