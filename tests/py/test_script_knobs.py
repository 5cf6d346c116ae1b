"""The knobs and arguments of scripts/setup.sh, test.sh, sanitize.sh, gpu-check.sh (and its summary module) and
studies/run.sh, checked before any work starts (scripts/lib/knobs.sh; docs/robustness.md#scripts-and-studies):
one line naming the variable or flag and what was expected, exit status 2, nothing started.

setup.sh, test.sh and sanitize.sh run from a copy of scripts/ in a scratch tree whose PATH holds stubs of every
tool they would start (cmake, ctest, ninja, dpkg-query, apt-get, pip's python, ...): a stub that runs writes a
marker, so a knob that slips through fails the test instead of starting a real build. gpu-check.sh always runs
with --dry-run, so a bad argument that is passed on shows up as a dry run that succeeds."""
import os
import shutil
import subprocess

import pytest

from conftest import ROOT

STUBS = ["cmake", "ctest", "ninja", "dpkg-query", "apt-get", "sudo", "nproc", "ccache", "ldd", "cuobjdump"]


def fake_root(tmp):
    """scripts/ copied into tmp/root, and a PATH directory whose tools only leave tmp/started behind."""
    root = tmp / "root"
    shutil.copytree(ROOT / "scripts", root / "scripts", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "requirements.txt", root / "requirements.txt")
    stubs = tmp / "stubs"
    stubs.mkdir()
    for tool in STUBS:
        (stubs / tool).write_text(f"#!/bin/sh\necho {tool} >> {tmp / 'started'}\nexit 1\n")
        (stubs / tool).chmod(0o755)
    (tmp / "a-file").write_text("not a directory\n")
    return root, stubs


def run_script(tmp, script, *args, **knobs):
    root, stubs = fake_root(tmp)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROPE_")}
    env.update(PATH=f"{stubs}:{env['PATH']}", **knobs)
    return subprocess.run(["bash", str(root / "scripts" / script), *args], capture_output=True, text=True, env=env,
                          cwd=tmp, timeout=60)


def refused(r, tmp, *needles):
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    assert not (tmp / "started").exists(), f"work started: {(tmp / 'started').read_text()}"


BAD_JOBS = ["0", "abc", "", "2x", "²", "-1", "1e3", "99999"]


@pytest.mark.parametrize("value", BAD_JOBS)
@pytest.mark.parametrize("script", ["setup.sh", "test.sh", "sanitize.sh"])
def test_jobs_must_be_a_positive_integer(script, value, tmp):
    refused(run_script(tmp, script, DROPE_JOBS=value), tmp, "DROPE_JOBS must be an integer in 1..1024", f"'{value}'")


@pytest.mark.parametrize("value", BAD_JOBS)
def test_test_jobs_must_be_a_positive_integer(value, tmp):
    refused(run_script(tmp, "test.sh", DROPE_TEST_JOBS=value), tmp, "scripts/test.sh: DROPE_TEST_JOBS must be")


KNOBS = [  # (scripts, variable, value, words of the message)
    (["setup.sh", "test.sh"], "DROPE_BUILD_DIR", "{tmp}/a-file", "exists and is not a directory"),
    (["setup.sh", "test.sh"], "DROPE_BUILD_DIR", "{tmp}/a-file/below", "a-file is not a directory"),
    (["setup.sh", "test.sh"], "DROPE_PYTHON", "no-such-python3", "not an executable python"),
    (["setup.sh", "test.sh"], "DROPE_CMAKE_ARGS", "-DX=1 Release", "'Release' is not a -DNAME=VALUE"),
    (["setup.sh", "test.sh"], "DROPE_CMAKE_ARGS", "-DDROPE_CUDA_ARCHS=sm90", "DROPE_CUDA_ARCHS must be a ';'"),
    (["setup.sh", "test.sh"], "DROPE_SETUP_TARGETS", "drope-eval ;rm", "';rm' is not a target name"),
    (["setup.sh", "test.sh"], "DROPE_WITH_CUDA", "maybe", "DROPE_WITH_CUDA must be ON or OFF"),
    (["sanitize.sh", "test.sh"], "DROPE_ASAN_BUILD_DIR", "{tmp}/a-file", "exists and is not a directory"),
    (["test.sh"], "DROPE_SANITIZE_TESTS", "yes", "DROPE_SANITIZE_TESTS must be 0 or 1, got 'yes'"),
    (["test.sh"], "DROPE_REQUIRE_PYTHON_EXT", "true", "DROPE_REQUIRE_PYTHON_EXT must be 0 or 1"),
]


@pytest.mark.parametrize("scripts, var, value, words", KNOBS)
def test_knobs_are_checked_first(scripts, var, value, words, tmp):
    for script in scripts:
        d = tmp / script
        d.mkdir()
        refused(run_script(d, script, **{var: value.format(tmp=d)}), d, f"scripts/{script}: {var}", words)


@pytest.mark.parametrize("script, args, words", [
    ("setup.sh", ["--fast"], "takes no arguments"),
    ("test.sh", ["--bogus"], "unknown ctest argument '--bogus'"),
    ("test.sh", ["-R"], "ctest option -R needs a value"),
    ("test.sh", ["-j", "0"], "ctest option -j must be a positive integer, got '0'"),
    ("test.sh", ["-jx"], "ctest option -j must be a positive integer"),
    ("test.sh", ["--repeat", "3"], "--repeat needs until-fail:N"),
    ("sanitize.sh", ["--filter=Config.*"], "unknown argument '--filter=Config.*'"),
    ("sanitize.sh", ["--gtest_repeat=x"], "--gtest_repeat must be an integer"),
])
def test_arguments_are_checked_first(script, args, words, tmp):
    refused(run_script(tmp, script, *args), tmp, f"scripts/{script}:", words)


def test_good_arguments_pass_the_checks(tmp):
    """What the checks accept reaches the first tool (a stub here)."""
    for script, args in (("test.sh", ["-R", "py.test_eval", "-j4", "--output-on-failure", "-LE", "slow"]),
                         ("sanitize.sh", ["--gtest_filter=Config.*", "--gtest_repeat=2"]),
                         ("setup.sh", [])):
        d = tmp / script
        d.mkdir()
        r = run_script(d, script, *args, DROPE_JOBS="2", DROPE_CMAKE_ARGS="-DDROPE_CUDA_ARCHS=80;90 -UFOO")
        assert r.returncode != 2 or "scripts/" not in r.stderr, r.stderr
        assert (d / "started").exists() or ".venv" in r.stderr, (script, r.stdout, r.stderr)


# ---- scripts/gpu-check.sh (always --dry-run) ------------------------------------------------------------------

def gpu_dry_run(tmp, *args, **knobs):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROPE_")}
    env.update({"DROPE_GPU_CHECK_OUT": str(tmp / "out"), "DROPE_BUILD_DIR": str(tmp / "build-gpu"), **knobs})
    return subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), "--dry-run", *args], capture_output=True,
                          text=True, env=env, timeout=120)


@pytest.mark.parametrize("args, words", [
    (["--dryrun"], "unknown argument '--dryrun'"),
    (["-n"], "unknown argument '-n'"),
    (["--rehearse=1"], "--rehearse takes no value"),
    (["--cases", "causal,bogus"], "--cases: 'bogus' is not one of causal, alibi, window, gqa"),
    (["--impls", ""], "--impls must be a comma list"),
    (["--lengths", "1024,0"], "--lengths must be a comma list of positive integers"),
    (["--heads=x"], "--heads must be a positive integer, got 'x'"),
    (["--warmup", "-1"], "--warmup must be an integer >= 0"),
    (["--max-seconds", "inf"], "--max-seconds must be a number > 0"),
    (["--repeats"], "--repeats needs a value"),
    (["--cases", "causal", "--cases", "gqa"], "--cases is given twice"),
    (["--device", "cpu"], "--device is set by the benchmark stages"),
    (["--json", "x.json"], "--json is set by the benchmark stages"),
])
def test_gpu_check_refuses_bad_arguments(args, words, tmp):
    r = gpu_dry_run(tmp, *args)
    assert r.returncode == 2, (r.returncode, r.stdout[-1500:], r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith("scripts/gpu-check.sh: ") and words in err, err
    assert not (tmp / "out").exists()


@pytest.mark.parametrize("var, value, words", [
    ("DROPE_GPU_REAL_STEPS", "abc", "DROPE_GPU_REAL_STEPS must be an integer in 1..100000, got 'abc'"),
    ("DROPE_GPU_REAL_STEPS", "0", "DROPE_GPU_REAL_STEPS must be"),
    ("DROPE_GPU_REAL_STEPS", "", "DROPE_GPU_REAL_STEPS must be"),
    ("DROPE_CUDA_ARCHS", "garbage", "DROPE_CUDA_ARCHS must be a ';'-separated list"),
    ("DROPE_CUDA_ARCHS", "80;", "DROPE_CUDA_ARCHS must be"),
    ("DROPE_CUDA_ARCHS", "sm_90", "DROPE_CUDA_ARCHS must be"),
    ("DROPE_CUDA_ARCHS", "80 90", "DROPE_CUDA_ARCHS must be"),
    ("DROPE_GPU_CHECK_PREBUILT", "yes", "DROPE_GPU_CHECK_PREBUILT must be 0 or 1"),
    ("DROPE_GPU_CHECK_BUDGET_TWO_RANKS", "0", "DROPE_GPU_CHECK_BUDGET_TWO_RANKS='0'"),
    ("DROPE_GPU_CHECK_BUDGET_TWO_RANK", "30", "DROPE_GPU_CHECK_BUDGET_TWO_RANK: no stage two_rank"),
    ("DROPE_PEAK_TFLOPS", "nan", "DROPE_PEAK_TFLOPS must be a number > 0"),
    ("DROPE_PEAK_TFLOPS", "0", "DROPE_PEAK_TFLOPS must be"),
    ("DROPE_JOBS", "0", "DROPE_JOBS must be an integer in 1..1024"),
    ("DROPE_PYTHON", "no-such-python3", "DROPE_PYTHON=no-such-python3: not an executable python"),
    ("DROPE_GPU_CHECK_OUT", "/dev/null", "DROPE_GPU_CHECK_OUT=/dev/null: exists and is not a directory"),
])
def test_gpu_check_dry_run_refuses_bad_knobs(var, value, words, tmp):
    r = gpu_dry_run(tmp, **{var: value})
    assert r.returncode == 2, (r.returncode, r.stdout[-1500:], r.stderr)
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and words in err, err


def test_gpu_check_passes_good_bench_arguments_and_replaces_its_sizes(tmp):
    r = gpu_dry_run(tmp, "--cases=causal,gqa", "--heads", "8", "--forward-only", DROPE_GPU_REAL_STEPS="30",
                    DROPE_CUDA_ARCHS="90a;100", DROPE_GPU_CHECK_BUDGET_GPU="20")
    assert r.returncode == 0, r.stdout + r.stderr
    bench = next(line for line in r.stdout.splitlines() if "stage attention_bench_d64 (budget" in line)
    assert bench.count("--heads") == 1 and "--heads 8" in bench and "--cases causal,gqa" in bench, bench
    assert "--forward-only" in bench and "--gqa-kv-heads 4" in bench
    assert "30 steps" in r.stdout and "DROPE_CUDA_ARCHS=90a;100" in r.stdout and "stage gpu (budget 20s)" in r.stdout


def test_gpu_check_summary_names_a_bad_stage(tmp):
    py = ROOT / ".venv" / "bin" / "python"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "scripts"))
    for stages, words in ((["setup", "bogus"], "'bogus' is not a stage"),
                          (["gpu", "gpu"], "stage 'gpu' is named twice")):
        r = subprocess.run([str(py), "-m", "drope_scripts.gpu_check", str(tmp), *stages], capture_output=True,
                           text=True, env=env, timeout=60)
        assert r.returncode == 2 and words in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp / "summary.json").exists()


# ---- studies/run.sh ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["__init__", "../scripts/drope_scripts/cli", "studies/quickstart", "quickstart.py",
                                  "Quickstart", "./quickstart", "-h", "quick start"])
def test_run_sh_takes_only_study_names(name, tmp):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DROPE_")}
    r = subprocess.run(["bash", str(ROOT / "studies" / "run.sh"), name, "--help"], capture_output=True, text=True,
                       env=env, cwd=tmp, timeout=60)
    err = r.stderr.strip()
    assert r.returncode == 2 and len(err.splitlines()) == 1, (r.returncode, r.stdout[-500:], err)
    assert f"studies/run.sh: '{name}' is not a study (expected one of: committed_verdicts," in err, err
    assert "__init__," not in err and "[setup]" not in r.stdout


def test_run_sh_lists_the_studies_without_a_name(tmp):
    r = subprocess.run(["bash", str(ROOT / "studies" / "run.sh")], capture_output=True, text=True, timeout=60)
    studies = sorted(p.stem for p in (ROOT / "studies").glob("*.py") if p.stem != "__init__")
    assert r.returncode == 2 and r.stderr.strip().endswith("NAME is one of: " + ", ".join(studies)), r.stderr
