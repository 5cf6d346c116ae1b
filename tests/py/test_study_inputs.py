"""Hostile inputs of the study entry points (studies/run.sh NAME and the scripts/*.sh wrappers): every bad flag or
environment variable is refused before any work starts (no set-up, no download, no conversion, no directory
made), with one line naming it and what was expected, a non-zero exit and no Python traceback
(drope_scripts.cli; docs/robustness.md#scripts-and-studies). The studies' own option tests are beside them
(test_recovery_study.py, test_real_model.py, test_scripts_pipelines.py, test_rehearse.py)."""
import os
import pathlib
import shutil
import subprocess
import sys
import time

import pytest

from conftest import ROOT, expect_error
from drope_scripts import cli
from studies import quickstart, real_model

# Entry points whose --out is a directory: the command (from the repository root) and the arguments it needs
# besides --out / --build. {study} is a directory with eval/ (failure_analysis reads a recovery study).
DIR_OUT = {
    "quickstart.sh": ["scripts/quickstart.sh"],
    "reproduce.sh": ["scripts/reproduce.sh"],
    "real_model.sh": ["scripts/real_model.sh"],
    "real_model.sh --recalibrate": ["scripts/real_model.sh", "--recalibrate"],
    "recovery_study.sh": ["scripts/recovery_study.sh"],
    "run.sh quickstart": ["studies/run.sh", "quickstart"],
    "run.sh reproduce": ["studies/run.sh", "reproduce"],
    "run.sh real_model": ["studies/run.sh", "real_model"],
    "run.sh real_model_recal": ["studies/run.sh", "real_model_recal"],
    "run.sh recovery_study": ["studies/run.sh", "recovery_study"],
    "run.sh failure_analysis": ["studies/run.sh", "failure_analysis", "--study", "{study}"],
    "run.sh prose_drop_study": ["studies/run.sh", "prose_drop_study"],
    "run.sh prose_sweep": ["studies/run.sh", "prose_sweep"],
    "run.sh offset_key_claims": ["studies/run.sh", "offset_key_claims"],
    "run.sh width_study": ["studies/run.sh", "width_study"],
    "run.sh rehearse": ["studies/run.sh", "rehearse"],
}
# Entry points whose --out is a file they write (an existing regular file is replaced).
FILE_OUT = {
    "run.sh committed_verdicts": ["studies/run.sh", "committed_verdicts"],
    "run.sh isa_compare": ["studies/run.sh", "isa_compare", "a={md}", "b={md}"],
    "run.sh quickstart_isa": ["studies/run.sh", "quickstart_isa"],
    "run.sh recovery_budgets": ["studies/run.sh", "recovery_budgets", "--study", "{study}"],
}
# They run no binary: --build is not an option.
NO_BUILD = {"run.sh committed_verdicts", "run.sh isa_compare", "run.sh recovery_budgets"}


def env0(**extra):
    """The environment without any drope knob; the set-up skipped (its requirements stamp may be stale here)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("DROPE_")}
    e.update({"DROPE_SKIP_SETUP": "1", **extra})
    return e


def run(cmd, tmp, env=None, timeout=60):
    fill = {"study": str(tmp / "study"), "md": str(tmp / "a.md")}
    args = [a.format(**fill) for a in cmd]
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(ROOT / args[0]), *args[1:]], capture_output=True, text=True, encoding="utf-8",
                       errors="replace", env=env or env0(), cwd=tmp, timeout=timeout)
    r.seconds = time.monotonic() - t0
    return r


def refused(r, *needles, code=2):
    """conftest.expect_error (every needle, no traceback), on one line, with the exit status of a usage error, and
    before the set-up."""
    expect_error(r, *needles)
    err = r.stderr.strip()
    assert r.returncode == code and len(err.splitlines()) == 1, (r.returncode, r.stdout[-2000:], err)
    assert "[setup]" not in r.stdout, r.stdout


@pytest.fixture
def inputs(tmp):
    (tmp / "study" / "eval").mkdir(parents=True)
    (tmp / "a.md").write_text("| a | b |\n|---|---|\n| x | 1 |\n")
    (tmp / "file").write_text("a regular file\n")
    return tmp


@pytest.mark.parametrize("name", sorted(DIR_OUT))
def test_out_that_is_a_file_is_refused(name, inputs):
    r = run([*DIR_OUT[name], "--out", "file"], inputs)
    refused(r, "--out", inputs / "file", "is not a directory")
    assert (inputs / "file").read_text() == "a regular file\n"
    r = run([*DIR_OUT[name], "--out", "file/below"], inputs)
    refused(r, "--out", inputs / "file" / "below", f"{inputs / 'file'} is not a directory")


@pytest.mark.parametrize("name", sorted(FILE_OUT))
def test_out_that_is_a_directory_is_refused(name, inputs):
    r = run([*FILE_OUT[name], "--out", "study"], inputs)
    refused(r, "--out", inputs / "study", "is a directory")
    r = run([*FILE_OUT[name], "--out", "file/x.md"], inputs)
    refused(r, "--out", f"{inputs / 'file'} is not a directory")


@pytest.mark.parametrize("name", sorted(set(DIR_OUT) | set(FILE_OUT)))
def test_build_that_is_missing_is_refused(name, inputs):
    cmd = DIR_OUT.get(name) or FILE_OUT[name]
    out = ["--out", "fresh" if name in DIR_OUT else "fresh.md"]
    r = run([*cmd, *out, "--build", "no-such-build"], inputs)
    if name in NO_BUILD:
        refused(r, "unrecognized arguments: --build")
    else:
        refused(r, "--build", inputs / "no-such-build", "no such directory")
    assert not (inputs / "fresh").exists() and not (inputs / "fresh.md").exists()
    if name not in NO_BUILD:  # --bin, the older spelling, is named as typed
        refused(run([*cmd, *out, "--bin", "file"], inputs), "--bin", inputs / "file", "not a directory")


@pytest.mark.parametrize("args, needles", [
    (["--lrs", "inf"], ["argument --lrs", "finite numbers in (0, 1]", "'inf'"]),
    (["--lrs", "1e-3,nan"], ["argument --lrs", "'1e-3,nan'"]),
    (["--lrs", "2"], ["argument --lrs", "(0, 1]"]),
    (["--tolerance", "nan"], ["argument --tolerance", "a finite number in [0, 100]", "'nan'"]),
    (["--tolerance", "-1"], ["argument --tolerance", "[0, 100]"]),
    (["--temperature", "nan"], ["--temperature must be auto or a finite number in [0, 10]", "'nan'"]),
    (["--temperature", "inf"], ["--temperature must be auto or a finite number in [0, 10]", "'inf'"]),
    (["--temperature", "11"], ["--temperature must be auto or a finite number in [0, 10]"]),
    (["--multipliers", "1,100000"], ["--multipliers: 100000 x C = 12,800,000 tokens", "at most 32768 at C = 128"]),
    (["--multipliers", "1,2.5"], ["argument --multipliers", "positive integers", "'1,2.5'"]),
    (["--multipliers", "1,inf"], ["argument --multipliers", "'1,inf'"]),
    (["--shares", "inf"], ["argument --shares", "finite numbers", "'inf'"]),
    (["--warmups", "nan"], ["argument --warmups", "[0, 1]"]),
    (["--poll", "nan"], ["argument --poll", "(0, 3600]"]),
    (["--seeds", "²"], ["argument --seeds", "an integer", "'²'"]),
    (["--seeds", "١٢"], ["argument --seeds", "'١٢'"]),  # int() would read 12
])
def test_recovery_study_numbers(args, needles, tmp):
    r = run(["scripts/recovery_study.sh", "--out", "study", *args], tmp)
    refused(r, *needles)
    assert not (tmp / "study").exists()


def test_recovery_study_help_documents_the_ranges(tmp):
    r = run(["scripts/recovery_study.sh", "--help"], tmp)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stderr
    for s in ("each in (0, 1]", "in [0, 100]", "a number c in [0, 10]", "distinct integers, 1 included",
              "4,194,304 tokens / C", "in (0, 3600]"):
        assert s in text, (s, text)


def test_real_model_refuses_a_missing_heldout_at_once(tmp):
    for cmd in (["scripts/real_model.sh"], ["scripts/real_model.sh", "--recalibrate"]):
        r = run([*cmd, "--heldout", "/missing", "--out", "out"], tmp)
        refused(r, "--heldout", "/missing", "no such file")
        assert r.seconds < 30 and not (tmp / "out").exists()
    r = run(["scripts/real_model.sh", "--gguf", "nothing.gguf", "--out", "out"], tmp)
    refused(r, "--gguf", tmp / "nothing.gguf", "no such file")
    r = run(["scripts/real_model.sh", "--heldout", ".", "--out", "out"], tmp)
    refused(r, "--heldout", "not a regular file")


@pytest.mark.parametrize("cmd, var, value, needle", [
    (["scripts/reproduce.sh"], "DROPE_REPRO_STEPS", "²", "reproduce: DROPE_REPRO_STEPS must be a positive integer, "
                                                         "got '²'"),
    (["scripts/reproduce.sh"], "DROPE_REPRO_SEEDS", "١٢", "DROPE_REPRO_SEEDS must be a positive integer, got '١٢'"),
    (["scripts/reproduce.sh"], "DROPE_REPRO_JOBS", "³", "DROPE_REPRO_JOBS must be an integer in 1..256, got '³'"),
    (["scripts/reproduce.sh"], "DROPE_REPRO_TRIALS", " 4", "DROPE_REPRO_TRIALS must be a positive integer"),
    (["scripts/reproduce.sh"], "DROPE_VOCAB", "4096.0", "DROPE_VOCAB must be an integer in 16..1048576"),
    (["scripts/quickstart.sh"], "DROPE_VOCAB", "²", "quickstart: DROPE_VOCAB must be an integer in 16..1048576, "
                                                    "got '²'"),
    (["scripts/quickstart.sh"], "DROPE_FORCE", "yes", "quickstart: DROPE_FORCE must be 0 or 1, got 'yes'"),
    (["scripts/quickstart.sh"], "DROPE_CORPUS_LOCAL", "true", "DROPE_CORPUS_LOCAL must be 0 or 1"),
    (["scripts/real_model.sh"], "DROPE_FORCE", "2", "real_model: DROPE_FORCE must be 0 or 1, got '2'"),
    (["scripts/make_corpus.sh", "--small"], "DROPE_VOCAB", "²", "make_corpus.sh: DROPE_VOCAB must be an integer"),
    (["studies/run.sh", "prose_sweep", "--plan"], "DROPE_VOCAB", "0", "prose_sweep: DROPE_VOCAB must be"),
])
def test_environment_numbers_are_ascii_and_named(cmd, var, value, needle, tmp):
    r = run([*cmd, "--out", "out"] if cmd[0] != "scripts/make_corpus.sh" else cmd, tmp, env=env0(**{var: value}))
    refused(r, needle)
    assert not (tmp / "out").exists()


def test_run_sh_refuses_a_bad_skip_setup(tmp):
    r = run(["scripts/quickstart.sh"], tmp, env=env0(DROPE_SKIP_SETUP="yes"))
    refused(r, "studies/run.sh: DROPE_SKIP_SETUP must be 0 or 1, got 'yes'")


def fake_root(tmp, stamp_current):
    """A copy of studies/run.sh in a tree whose setup.sh and run_python.sh only say that they ran."""
    root = tmp / "root"
    (root / "studies").mkdir(parents=True)
    (root / "scripts").mkdir()
    (root / ".venv" / "bin").mkdir(parents=True)
    shutil.copy(ROOT / "studies" / "run.sh", root / "studies" / "run.sh")
    (root / "studies" / "real_model.py").write_text("def main(argv=None):\n    pass\n")
    (root / "scripts" / "setup.sh").write_text('echo "[setup] ran"\n')
    (root / "scripts" / "run_python.sh").write_text('echo "study $1 pending=${DROPE_SETUP_PENDING:-} args ${*:2}"\n')
    (root / ".venv" / "bin" / "python").write_text("#!/bin/sh\n")
    (root / ".venv" / "bin" / "python").chmod(0o755)
    (root / "requirements.txt").write_text("torch==1\n")
    (root / ".venv" / ".drope-requirements").write_text("torch==1\n" if stamp_current else "torch==0\n")
    return root


def test_run_sh_leaves_the_set_up_to_the_study_once_the_venv_is_current(tmp):
    """With a current venv the study checks its arguments first and runs the set-up itself; before that (a new
    checkout, changed requirements) run.sh runs it first, since no Python can check anything yet."""
    env = {k: v for k, v in env0().items() if k != "DROPE_SKIP_SETUP"}
    for current, setup_first, pending in ((True, False, "1"), (False, True, "")):
        root = fake_root(tmp / str(current), current)
        r = subprocess.run(["bash", str(root / "studies" / "run.sh"), "real_model", "--quick"], capture_output=True,
                           text=True, env=env, timeout=60)
        assert r.returncode == 0, r.stderr
        assert ("[setup] ran" in r.stdout) == setup_first, r.stdout
        assert f"study studies.real_model pending={pending} args --quick" in r.stdout, r.stdout
        r = subprocess.run(["bash", str(root / "studies" / "run.sh"), "real_model"], capture_output=True, text=True,
                           env={**env, "DROPE_SKIP_SETUP": "1", "DROPE_SETUP_PENDING": "1"}, timeout=60)
        assert "[setup] ran" not in r.stdout and "pending= " in r.stdout, r.stdout  # never inherited


def test_the_pending_set_up_runs_after_the_checks(tmp, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(cli.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(
        cmd, 0))
    monkeypatch.setenv("DROPE_SETUP_PENDING", "1")
    monkeypatch.setenv("DROPE_CALLER_CWD", str(tmp))
    with pytest.raises(SystemExit) as e:
        real_model.main(["--heldout", "/missing"])
    assert e.value.code == 2 and calls == [] and "--heldout /missing: no such file" in capsys.readouterr().err
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for t in quickstart.TOOLS:
        (bin_dir / t).write_text("#!/bin/sh\n")
        (bin_dir / t).chmod(0o755)
    run_dir, got = quickstart.parse(["--out", "run", "--build", "bin"])
    assert (run_dir, got) == (tmp / "run", bin_dir)
    assert calls == [["bash", str(ROOT / "scripts" / "setup.sh")]] and "DROPE_SETUP_PENDING" not in os.environ
    monkeypatch.setenv("DROPE_SETUP_PENDING", "1")
    monkeypatch.setattr(cli.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(cmd, 3))
    with pytest.raises(SystemExit) as e:
        quickstart.parse(["--build", "bin"])
    assert e.value.code == 3 and "quickstart: scripts/setup.sh exited 3" in capsys.readouterr().err


# ---- drope_scripts.cli ----------------------------------------------------------------------------------------

def test_numbers_are_ascii_and_finite():
    assert cli.to_int("12", "X") == 12 and cli.to_int("-3", "X", lo=-5) == -3
    for bad in ("²", "١٢", " 1", "1 ", "1_0", "0x10", "", "1.0"):
        with pytest.raises(cli.UsageError, match="X must be a positive integer"):
            cli.to_int(bad, "X", 1)
    with pytest.raises(cli.UsageError, match=r"X must be an integer in 1\.\.256, got '257'"):
        cli.to_int("257", "X", 1, 256)
    assert cli.to_float("1e-3", "Y", 0, 1, lo_open=True) == 1e-3 and cli.to_float(".5", "Y") == 0.5
    for bad in ("inf", "-inf", "nan", "NaN", "1e999", "1_0", "½", "0", "1.5"):
        with pytest.raises(cli.UsageError, match=r"Y must be a finite number in \(0, 1\]"):
            cli.to_float(bad, "Y", 0, 1, lo_open=True)
    assert cli.int_list_type(1)("1, 2,4") == (1, 2, 4)
    assert cli.float_list_type(0)("0,2.5") == (0.0, 2.5)
    assert cli.ascii_digits("123") and not cli.ascii_digits("1²") and not cli.ascii_digits("")


def test_environment_knobs(monkeypatch):
    env = {"A": "3", "B": "", "C": "²", "D": "1", "E": "on"}
    assert cli.env_int("A", 7, env=env) == 3 and cli.env_int("Z", 7, env=env) == 7
    with pytest.raises(cli.UsageError, match="C must be a positive integer, got '²'"):
        cli.env_int("C", 7, env=env)
    with pytest.raises(cli.UsageError, match="B must be a positive integer, got ''"):  # set but empty: not a number
        cli.env_int("B", 7, env=env)
    assert cli.env_float("A", 0.0, env=env) == 3.0
    assert cli.env_switch("D", env) and not cli.env_switch("B", env) and not cli.env_switch("Z", env)
    with pytest.raises(cli.UsageError, match="E must be 0 or 1, got 'on'"):
        cli.env_switch("E", env)


def test_paths(tmp):
    (tmp / "f").write_text("")
    (tmp / "d").mkdir()
    assert cli.out_dir(tmp / "new" / "deeper", "--out") == tmp / "new" / "deeper"
    with pytest.raises(cli.UsageError, match="exists and is not a directory"):
        cli.out_dir(tmp / "f", "--out")
    with pytest.raises(cli.UsageError, match=f"{tmp / 'f'} is not a directory"):
        cli.out_dir(tmp / "f" / "x" / "y", "--out")
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    with pytest.raises(cli.UsageError, match="dangling"):
        cli.out_dir(tmp / "dangling", "--out")
    assert cli.out_file(tmp / "f", "--csv") == tmp / "f"
    with pytest.raises(cli.UsageError, match="is a directory"):
        cli.out_file(tmp / "d", "--csv")
    with pytest.raises(cli.UsageError, match="no such file"):
        cli.in_file(tmp / "none", "--heldout")
    with pytest.raises(cli.UsageError, match="not a regular file"):
        cli.in_file(tmp / "d", "--heldout")
    with pytest.raises(cli.UsageError, match=r"--build .*: no drope-train, drope-eval there \(build first"):
        cli.tools_in(tmp / "d", "--build", ("drope-train", "drope-eval"))


def test_no_script_parses_numbers_around_the_helpers():
    """Numeric environment knobs and digit tests go through drope_scripts.cli (one place, ASCII only)."""
    import re

    bad = re.compile(r"\.is(digit|decimal|numeric)\(|\b(int|float)\((os\.)?env(iron)?\b")
    hits = []
    for p in [*(ROOT / "scripts").rglob("*.py"), *(ROOT / "studies").glob("*.py")]:
        if p.name == "cli.py" or "__pycache__" in p.parts:
            continue
        hits += [f"{p.relative_to(ROOT)}:{i}" for i, line in enumerate(p.read_text().splitlines(), 1)
                 if bad.search(line)]
    assert not hits, hits


def test_every_study_is_covered():
    studies = {p.stem for p in (ROOT / "studies").glob("*.py")} - {"__init__"}
    named = {c[1] for c in [*DIR_OUT.values(), *FILE_OUT.values()] if c[0] == "studies/run.sh"}
    assert studies == named, studies ^ named
    wrappers = {p.name for p in (ROOT / "scripts").glob("*.sh")
                if "studies/run.sh" in p.read_text() and p.name != "run_python.sh"}
    assert wrappers == {c[0].split("/")[1] for c in DIR_OUT.values() if c[0].startswith("scripts/")}


def test_no_study_imports_scipy_stats_before_it_checks_its_arguments():
    """Importing scipy.stats takes about 2 s: a study pays it when it computes, not to refuse a mistyped flag."""
    studies = sorted(p.stem for p in (ROOT / "studies").glob("*.py") if p.stem != "__init__")
    code = ("import importlib, sys\n"
            f"for name in {studies!r}:\n"
            "    importlib.import_module('studies.' + name)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('scipy.stats', 'torch', 'transformers'))))\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=f"{ROOT / 'scripts'}:{ROOT}"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]", r.stdout


def test_quickstart_and_reproduce_take_no_other_arguments(tmp):
    for script in ("scripts/quickstart.sh", "scripts/reproduce.sh"):
        refused(run([script, "--fast"], tmp), "unrecognized arguments: --fast")


def test_caller_relative_paths(tmp, monkeypatch):
    monkeypatch.setenv("DROPE_CALLER_CWD", str(tmp))
    assert cli.caller_path("x/y") == tmp / "x" / "y"
    assert cli.caller_path(pathlib.Path("/abs")) == pathlib.Path("/abs")
