"""The environment is read in one place: src/core/environment.cpp declares every variable the tools read, no
other source calls getenv, every name the sources read is declared (and every declared name is read), the docs
table is the generated one, and the DROPE_FAULT_* test hooks do nothing without DROPE_TEST_FAULTS=1."""
import os
import re
import subprocess

from conftest import BIN, ROOT, expect_error, micro_train_yaml, run_cli

SOURCES = [p for d in ("src", "apps", "include", "python", "bench")
           for p in sorted((ROOT / d).rglob("*")) if p.suffix in (".cpp", ".h", ".cu", ".cuh", ".cc")]
HOME = ROOT / "src" / "core" / "environment.cpp"
# The readers that take a variable's name as a literal.
READ = re.compile(r"\b(?:env::get|env::is_set|env_switch|env_int|fault_steps)\(\s*\"([A-Z][A-Z0-9_]*)\"")
READ_LIST = re.compile(r"\bint_from_env\(\{([^}]*)\}")


def declared():
    table = run_cli("drope-train", "settings", "--markdown").stdout
    body = table.split("<!-- environment:begin -->", 1)[1].split("<!-- environment:end -->", 1)[0]
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", body, flags=re.M)


def read_in_sources():
    names = set()
    for p in SOURCES:
        if p == HOME:  # the module itself reads a few directly (DROPE_TEST_FAULTS gates the fault hooks)
            names |= set(re.findall(r"\braw\(\"([A-Z][A-Z0-9_]*)\"\)", p.read_text(encoding="utf-8")))
            continue
        text = p.read_text(encoding="utf-8", errors="replace")
        names |= set(READ.findall(text))
        for group in READ_LIST.findall(text):
            names |= set(re.findall(r"\"([A-Z][A-Z0-9_]*)\"", group))
    return names


def test_only_the_environment_module_calls_getenv():
    offenders = []
    for p in SOURCES:
        if p == HOME:
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if re.search(r"\b(?:secure_)?getenv\s*\(", line):
                offenders.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "read the environment through drope::env (src/core/environment.cpp):\n" + "\n".join(
        offenders)
    assert "std::getenv(" in HOME.read_text(encoding="utf-8")


def test_every_name_read_is_declared_and_every_declared_name_is_read():
    names = declared()
    assert len(names) == len(set(names)) and len(names) > 30
    read = read_in_sources()
    assert {"DROPE_CPU_ISA", "RANK", "OMP_NUM_THREADS", "DROPE_FAULT_NAN_AT_STEP"} <= read
    assert read - set(names) == set(), "read but not declared"
    assert set(names) - read == set(), "declared but never read"


def test_fault_hooks_do_nothing_without_the_switch(tmp):
    cfg = tmp / "t.yaml"
    cfg.write_text(micro_train_yaml(tmp / "run", 3))
    env = dict(os.environ, OMP_NUM_THREADS="1", DROPE_FAULT_NAN_AT_STEP="2")
    env.pop("DROPE_TEST_FAULTS", None)
    r = subprocess.run([str(BIN / "drope-train"), str(cfg)], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "DROPE_FAULT_NAN_AT_STEP: test fault hooks, ignored without DROPE_TEST_FAULTS=1" in r.stderr, r.stderr
    assert "non-finite" not in r.stdout + r.stderr
    # With the switch the same hook makes step 2 non-finite (the crash-safety tests build on it).
    env["DROPE_TEST_FAULTS"] = "1"
    cfg.write_text(micro_train_yaml(tmp / "run2", 3))
    r = subprocess.run([str(BIN / "drope-train"), str(cfg)], capture_output=True, text=True, env=env, timeout=240)
    assert r.returncode == 0, r.stderr
    assert "step 2: non-finite loss/gradient norm" in r.stderr and "ignored without" not in r.stderr, r.stderr


def switches():
    """drope's own 0/1 switches, from the generated table."""
    table = run_cli("drope-train", "settings", "--markdown").stdout
    return re.findall(r"^\| `(DROPE_[A-Z0-9_]*)` \| `0`, `1` \|", table, flags=re.M)


def test_a_bad_switch_value_is_refused_at_start(tmp):
    """Every 0/1 switch is checked when a tool starts, not where it is first read (some are read mid-run, some
    only on a CPU or GPU that has the feature, where a typo would otherwise switch nothing silently)."""
    names = switches()
    assert {"DROPE_TEST_FAULTS", "DROPE_ATTENTION_AMX", "DROPE_CUDNN_GRAPH", "DROPE_SHARD_PREFETCH"} <= set(names)
    for name in names:
        env = dict(os.environ, **{name: "yes"})
        r = subprocess.run([str(BIN / "drope-model"), "info", "--preset", "micro"], capture_output=True, text=True,
                           env=env, timeout=120)
        expect_error(r, f"environment variable {name}='yes': expected 0 or 1")


def test_bad_openmp_and_fault_values_are_refused_at_start(tmp):
    """OpenMP's own variables and the fault hooks are checked when a tool starts: libgomp alone only warns about
    OMP_NUM_THREADS=abc and goes on with its default, and a fault hook given ' 4' would never fire."""
    cases = [({"OMP_NUM_THREADS": "abc"}, "OMP_NUM_THREADS='abc': expected an integer ≥ 1"),
             ({"OMP_NUM_THREADS": "0"}, "OMP_NUM_THREADS='0': expected an integer ≥ 1"),
             ({"OMP_WAIT_POLICY": "sleepy"}, "OMP_WAIT_POLICY='sleepy': expected PASSIVE, ACTIVE"),
             ({"DROPE_TEST_FAULTS": "1", "DROPE_FAULT_NAN_AT_STEP": "0"},
              "DROPE_FAULT_NAN_AT_STEP='0': expected comma-separated steps ≥ 1")]
    for extra, message in cases:
        env = dict(os.environ, **extra)
        r = subprocess.run([str(BIN / "drope-model"), "info", "--preset", "micro"], capture_output=True, text=True,
                           env=env, timeout=120)
        expect_error(r, f"environment variable {message}")
    env = dict(os.environ, OMP_NUM_THREADS="1,1", OMP_WAIT_POLICY="passive")
    r = subprocess.run([str(BIN / "drope-model"), "info", "--preset", "micro"], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
