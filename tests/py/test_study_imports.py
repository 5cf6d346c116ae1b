"""The shape of the Python side: studies/*.py build on the library drope_scripts and never on one another, no
module of either imports itself back through others, and neither runs `git add` / `git commit` (a study writes its
rows and its page's section; the person who ran it commits them). Every import is read with `ast`, those inside
functions included, so a deferred import cannot hide an edge."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"studies": ROOT / "studies", "drope_scripts": ROOT / "scripts" / "drope_scripts"}
# The one library module that reads the studies: it regenerates the pages' sections from each study's own
# results_md, so that a page and its CSV cannot disagree.
READS_STUDIES = {"drope_scripts.doc_numbers"}
GIT_WRITES = {"add", "commit"}


def modules() -> dict[str, Path]:
    return {f"{pkg}.{p.stem}": p for pkg, base in PACKAGES.items() for p in sorted(base.glob("*.py"))}


def imports(name: str, tree: ast.AST, known: set[str]) -> set[str]:
    """The modules of `known` that `tree` (the module `name`) imports, anywhere in it."""
    pkg = name.split(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = f"{pkg}.{node.module}" if node.level and node.module else pkg if node.level else node.module
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {n: imports(n, ast.parse(p.read_text(encoding="utf-8"), str(p)), set(mods)) for n, p in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path that returns to its start) per strongly connected knot of `edges`, depth first."""
    out, state = [], {}

    def visit(n: str, path: list[str]) -> None:
        state[n] = "open"
        for m in sorted(edges.get(n, ())):
            if state.get(m) == "open":
                out.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m, [*path, m])
        state[n] = "done"

    for n in sorted(edges):
        if n not in state:
            visit(n, [n])
    return out


def git_writes(tree: ast.AST) -> list[int]:
    """Lines of calls that run `git add` or `git commit`: an argument list holding "git" and then one of them, or
    a command string that starts with git and names one."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        for arg in node.args:
            words = [e.value for e in getattr(arg, "elts", ())
                     if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            if "git" in words and GIT_WRITES & set(words[words.index("git"):]):
                lines.append(node.lineno)
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and \
                    re.match(r"\s*git\b.*\b(add|commit)\b", arg.value):
                lines.append(node.lineno)
    return lines


def test_the_graph_is_read():
    g = graph()
    assert "drope_scripts.study" in g["studies.prose_sweep"]  # the reader sees `from drope_scripts import study`
    assert "drope_scripts.driver" in g["drope_scripts.study"]  # ... and relative imports inside the library
    assert len([n for n in g if n.startswith("studies.")]) >= 15


def test_no_study_imports_another():
    bad = sorted((n, m) for n, deps in graph().items() if n.startswith("studies.")
                 for m in deps if m.startswith("studies."))
    assert not bad, "a study imports another (move what they share to drope_scripts): " + \
        ", ".join(f"{n} -> {m}" for n, m in bad)


def test_the_library_imports_no_study():
    bad = sorted((n, m) for n, deps in graph().items() if n.startswith("drope_scripts.") and n not in READS_STUDIES
                 for m in deps if m.startswith("studies."))
    assert not bad, ", ".join(f"{n} -> {m}" for n, m in bad)


def test_no_import_cycle():
    assert not cycles(graph()), cycles(graph())


@pytest.mark.parametrize("edges, found", [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b", "a"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"b"}}, [["b", "c", "b"]]),
])
def test_the_cycle_finder(edges, found):
    assert cycles(edges) == found


def test_no_study_or_library_module_commits():
    bad = [f"{p.relative_to(ROOT)}:{line}" for p in modules().values()
           for line in git_writes(ast.parse(p.read_text(encoding="utf-8")))]
    assert not bad, "git add / git commit is the user's step, not a study's: " + ", ".join(bad)
    run_sh = (ROOT / "studies" / "run.sh").read_text(encoding="utf-8")
    assert not re.search(r"^[^#]*\bgit\s+(-C\s+\S+\s+)?(add|commit)\b", run_sh, re.M)


def test_the_commit_finder():
    code = ('subprocess.run(["git", "-C", str(root), "commit", "-m", m])\nsubprocess.run("git add x", shell=True)\n'
            'subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"])\nsubprocess.run(["git", "status"])\n')
    assert git_writes(ast.parse(code)) == [1, 2]
