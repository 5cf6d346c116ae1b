"""scripts/lint.sh on a scratch repository holding the project's style files: it passes on formatted files,
fails naming a C++ file that clang-format would change or a Python file with a ruff finding, and --fix
rewrites them; and the project's own tracked files pass it (what .ci/run checks first)."""
import os
import re
import shutil
import subprocess

import pytest

from conftest import ROOT

VENV_BIN = ROOT / ".venv" / "bin"
GOOD_CPP = """\
#include <vector>

namespace demo {

int total(const std::vector<int>& xs) {
  int s = 0;
  for (int x : xs) s += x;
  return s;
}

}  // namespace demo
"""
BAD_CPP = GOOD_CPP.replace("  int s = 0;", "    int s=0;")
GOOD_PY = '"""A module."""\nimport os\n\nprint(os.sep)\n'
BAD_PY = '"""A module."""\nimport os\nimport sys\n\nprint(os.sep)\n'  # sys unused (F401)


def tools_env():
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    for t in ("clang-format", "ruff"):
        if not shutil.which(t, path=env["PATH"]):
            pytest.skip(f"{t} is not installed (scripts/setup.sh installs it from requirements.txt)")
    version = subprocess.run(["clang-format", "--version"], env=env, capture_output=True, text=True).stdout
    major = re.search(r"version (\d+)", version)
    if not major or int(major.group(1)) < 16:
        pytest.skip(f"clang-format >= 16 needed, found: {version.strip()} (requirements.txt pins the wheel)")
    return env


@pytest.fixture
def repo(tmp_path):
    for f in (".clang-format", "ruff.toml", "scripts/lint.sh"):
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / f, tmp_path / f)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.cpp").write_text(GOOD_CPP)
    (tmp_path / "scripts" / "a.py").write_text(GOOD_PY)
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def lint(repo, *args):
    return subprocess.run(["bash", str(repo / "scripts" / "lint.sh"), *args], cwd=repo, env=tools_env(),
                          capture_output=True, text=True, timeout=120)


def add(repo, rel, text):
    (repo / rel).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", rel], check=True)


def test_formatted_files_pass(repo):
    add(repo, "src/a.cpp", GOOD_CPP)
    add(repo, "scripts/a.py", GOOD_PY)
    r = lint(repo)
    assert r.returncode == 0, r.stderr


def test_a_misformatted_cpp_file_fails_and_fix_formats_it(repo):
    add(repo, "src/a.cpp", GOOD_CPP)
    add(repo, "src/b.cpp", BAD_CPP)
    r = lint(repo)
    assert r.returncode == 1
    assert "not clang-formatted: src/b.cpp" in r.stderr
    assert "src/a.cpp" not in r.stderr
    assert lint(repo, "--fix").returncode == 0
    assert (repo / "src" / "b.cpp").read_text() == GOOD_CPP
    assert lint(repo).returncode == 0


def test_a_ruff_finding_fails(repo):
    add(repo, "scripts/a.py", BAD_PY)
    r = lint(repo)
    assert r.returncode == 1
    assert "scripts/a.py" in r.stdout + r.stderr and "F401" in r.stdout + r.stderr
    assert lint(repo, "--fix").returncode == 0
    assert (repo / "scripts" / "a.py").read_text() == GOOD_PY


def test_untracked_files_are_not_checked(repo):
    (repo / "src" / "scratch.cpp").write_text(BAD_CPP)
    assert lint(repo).returncode == 0


def test_bad_usage_is_refused(repo):
    r = lint(repo, "--bogus")
    assert r.returncode == 2 and "unknown option --bogus" in r.stderr


def test_the_project_tree_passes():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: lint.sh lists the tracked files")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "lint.sh")], cwd=ROOT, env=tools_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
