"""CPU settings every tool applies before LibTorch starts: the instruction-set override (DROPE_CPU_ISA) and
the OpenMP defaults set from .preinit_array (threads from the CPU budget, passive waiting), each left alone
when the user set it."""
import os
import pathlib
import re
import shutil
import subprocess

import pytest

BIN = pathlib.Path(os.environ.get("DROPE_BIN", pathlib.Path(__file__).resolve().parents[2] / "build"))
BENCH = [str(BIN / "drope-bench"), "attention", "--lengths", "16", "--cases", "causal", "--impls", "ours",
         "--repeats", "1", "--warmup", "0", "--quiet"]


def bench_header(env_extra, prefix=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "DROPE_"))}
    env.update(env_extra)
    r = subprocess.run(list(prefix) + BENCH, capture_output=True, text=True, env=env, timeout=120)
    return r


def test_openmp_defaults_set_before_the_runtime_starts():
    r = bench_header({})
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "OMP_WAIT_POLICY=PASSIVE" in head, head
    m = re.search(r"affinity (\d+), cgroup quota \S+ -> (\d+) threads; OMP_NUM_THREADS=(\d+)", head)
    assert m, head
    assert int(m.group(1)) == len(os.sched_getaffinity(0))
    assert m.group(2) == m.group(3), head  # the budget reached libgomp
    assert f"| {m.group(2)} threads |" in head, head  # and LibTorch's intra-op pool


def test_user_settings_win_and_defaults_can_be_turned_off():
    r = bench_header({"OMP_WAIT_POLICY": "ACTIVE", "OMP_NUM_THREADS": "1"})
    head = r.stdout.splitlines()[0]
    assert "OMP_WAIT_POLICY=ACTIVE" in head and "OMP_NUM_THREADS=1" in head and "| 1 threads |" in head, head
    r = bench_header({"DROPE_OMP_DEFAULTS": "0"})
    head = r.stdout.splitlines()[0]
    assert "OMP_WAIT_POLICY=-" in head and "OMP_NUM_THREADS=-" in head, head


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset missing")
def test_threads_follow_the_affinity_mask():
    r = bench_header({}, prefix=("taskset", "-c", "0"))
    head = r.stdout.splitlines()[0]
    assert "affinity 1" in head and "OMP_NUM_THREADS=1" in head and "| 1 threads |" in head, head


@pytest.mark.parametrize("value,needle", [("avx3", "expected avx512, avx2, baseline or native"),
                                          ("AVX2", "expected avx512, avx2, baseline or native")])
def test_bad_isa_override_is_refused_at_start(value, needle):
    r = bench_header({"DROPE_CPU_ISA": value})
    assert r.returncode == 1
    assert r.stderr.startswith("error: DROPE_CPU_ISA") and needle in r.stderr, r.stderr
    assert r.stdout == ""


def test_isa_override_is_used_or_refused_when_the_cpu_lacks_it():
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    for level, has in (("baseline", True), ("avx2", " avx2" in flags and " fma" in flags),
                       ("avx512", all(f" {f}" in flags for f in ("avx512f", "avx512dq", "avx512bw", "avx512vl")))):
        r = bench_header({"DROPE_CPU_ISA": level})
        if has:
            assert r.returncode == 0, r.stderr
            assert f"drope kernels {level}" in r.stdout.splitlines()[0]
        else:
            assert r.returncode == 1 and "this CPU lacks" in r.stderr, r.stderr


@pytest.mark.parametrize("name", ["DROPE_COMPOSITE_LAYERS", "DROPE_OMP_DEFAULTS", "DROPE_ONEDNN_LINEAR"])
@pytest.mark.parametrize("value", ["true", "false", " 1"])
def test_every_environment_switch_takes_only_0_or_1(name, value):
    r = bench_header({name: value})
    assert r.returncode == 1, r.stdout
    assert r.stderr.startswith(f"error: environment variable {name}='{value}': expected 0 or 1"), r.stderr
    assert r.stderr.count("\n") == 1 and r.stdout == "", r.stderr


@pytest.mark.parametrize("name", ["DROPE_COMPOSITE_LAYERS", "DROPE_OMP_DEFAULTS"])
@pytest.mark.parametrize("value", ["0", "1"])
def test_environment_switches_accept_0_and_1(name, value):
    r = bench_header({name: value})
    assert r.returncode == 0, r.stderr
