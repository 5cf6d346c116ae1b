"""isa_compare (two runs' results side by side), quickstart_isa's argument checks and the one ISA table."""
import pathlib
import subprocess

import pytest

from drope_scripts import isa_levels
from studies import isa_compare

ROOT = pathlib.Path(__file__).resolve().parents[2]
A = """# results

| prose (Austen) | ppl@256 (C) | ppl@512 (2C) |
|---|---:|---:|
| RoPE | 73.97 | 74.99 |
| DroPE | 86.17 | 87.39 |

| method | C = 128 (all) | 2C (far) |
|---|---:|---:|
| RoPE | 100.0 ± 0.1 | 88.5 |
| DroPE c=0 | 99.9 | 86.4 |
"""


def test_differing_cells_are_marked_and_ranked():
    b = A.replace("86.17", "86.20").replace("88.5", "86.0")
    merged, diffs, cells = isa_compare.compare(A, b, "avx2", "baseline")
    assert cells == 8
    assert [(d.where, d.a, d.b) for d in diffs] == [("RoPE / 2C (far)", "88.5", "86.0"),
                                                    ("DroPE / ppl@256 (C)", "86.17", "86.20")]
    assert diffs[0].delta == pytest.approx(2.5) and diffs[1].delta == pytest.approx(0.03)
    assert "| DroPE | 86.17 → 86.20 | 87.39 |" in merged and "| RoPE | 73.97 | 74.99 |" in merged
    assert "2 of 8 numeric cells differ" in isa_compare.report(A, b, "avx2", "baseline")


def test_identical_runs_differ_nowhere():
    merged, diffs, cells = isa_compare.compare(A, A, "x", "y")
    assert merged == A and diffs == [] and cells == 8


@pytest.mark.parametrize("b, message", [
    (A.replace("| DroPE c=0 | 99.9 | 86.4 |\n", ""), "table rows"),
    (A.replace("| DroPE | 86.17", "| NoPE | 86.17"), "not the same row: 'DroPE' vs 'NoPE'"),
    (A.replace("ppl@512 (2C)", "ppl@1024 (4C)"), "different table headers"),
])
def test_other_tables_are_refused(b, message):
    with pytest.raises(ValueError, match=message):
        isa_compare.compare(A, b, "a", "b")


def test_cli_refuses_bad_arguments_and_never_writes_over_an_input(tmp_path, capsys):
    a = tmp_path / "a.md"
    a.write_text(A)
    assert isa_compare.main(["x=" + str(a), "y=" + str(tmp_path / "none.md"), "--out", str(tmp_path / "o.md")]) == 2
    assert "none.md: not a regular file" in capsys.readouterr().err
    assert isa_compare.main(["x" + str(a), "y=" + str(a), "--out", str(tmp_path / "o.md")]) == 2
    assert "expected LABEL=FILE" in capsys.readouterr().err
    assert isa_compare.main(["x=" + str(a), "y=" + str(a), "--out", str(a)]) == 2
    assert "is one of the inputs" in capsys.readouterr().err and a.read_text() == A
    assert not (tmp_path / "o.md").exists()
    assert isa_compare.main(["x=" + str(a), "y=" + str(a), "--out", str(tmp_path / "o.md")]) == 0
    assert "0 of 8 numeric cells differ" in (tmp_path / "o.md").read_text()


@pytest.mark.parametrize("args, message", [
    (["avx2"], "expected two levels"),
    (["avx2", "avx2"], "the two levels must differ"),
    (["avx2", "sse9"], "unknown level 'sse9'"),
])
def test_quickstart_isa_refuses_bad_levels(args, message):
    p = subprocess.run(["bash", str(ROOT / "studies" / "run.sh"), "quickstart_isa", *args], capture_output=True,
                       text=True, env={"PATH": "/usr/bin:/bin", "DROPE_SKIP_SETUP": "1"}, timeout=60)
    assert p.returncode == 2 and message in p.stderr


def test_bash_and_python_read_the_one_isa_table():
    for level, env in isa_levels.levels().items():
        p = subprocess.run(["bash", "-c", 'source "$0" && isa_env "$1"', str(ROOT / "scripts" / "lib" / "isa_env.sh"),
                            level], capture_output=True, text=True, check=True)
        assert p.stdout.strip() == isa_levels.describe(level)
        assert env["DROPE_CPU_ISA"] == level and set(env) == {"DROPE_CPU_ISA", "ATEN_CPU_CAPABILITY",
                                                              "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS"}
    assert list(isa_levels.levels()) == ["avx512", "avx2", "baseline"]
    with pytest.raises(ValueError, match="unknown level 'sse9'"):
        isa_levels.env("sse9")
