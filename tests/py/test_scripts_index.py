"""scripts/README.md, the index of scripts/, studies/ and bench/, names every entry file there, and the one study
runner lists and refuses by the same names."""
import subprocess

from conftest import ROOT


def entries():
    yield from (p.name for p in (ROOT / "scripts").glob("*.sh"))
    yield from (p.name for p in (ROOT / "bench").glob("*.py"))
    yield from (p.name for p in (ROOT / "bench").glob("*.sh"))
    yield from (f"`{p.stem}`" for p in (ROOT / "studies").glob("*.py") if p.stem != "__init__")


def test_the_index_names_every_entry_file():
    index = (ROOT / "scripts" / "README.md").read_text()
    missing = [name for name in entries() if name not in index]
    assert not missing, f"scripts/README.md does not say what these do: {missing}"


def test_the_study_runner_lists_the_studies_and_refuses_others():
    r = subprocess.run(["bash", str(ROOT / "studies" / "run.sh"), "no_such_study"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "'no_such_study' is not a study (expected one of: " in r.stderr, r.stderr
    listed = set(r.stderr.split("expected one of: ", 1)[1].rstrip().rstrip(")").split(", "))
    assert listed == {p.stem for p in (ROOT / "studies").glob("*.py")} - {"__init__"}
