"""What the studies share: the provenance of a row (the commit of a clean tree, the CPU), retries around tools that
are being rebuilt, typed CSV tables of rows, a page's generated section, the inputs of the real-model studies, and
the slope statistics a study's protocol names (Holm is stats.holm). No study imports another; each imports this.

A study writes its rows and its page's section and never commits them: the person who ran it reviews and commits
the CSV and the page (git add / git commit of those paths)."""
from __future__ import annotations

import csv
import io
import math
import os
import pathlib
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from . import stats
from .atomic import write_atomic
from .driver import ROOT, ToolError, cpu_count

T = TypeVar("T")
# The tools of a study that prepares data, trains and scores (the quickstart and the studies built on it).
TRAINING_TOOLS = ("drope-train", "drope-eval", "drope-data")
# The paths whose state decides what the binaries are: a row measured with binaries built from a tree that differs
# from HEAD in these cannot be reproduced from any commit.
SOURCE_PATHS = ("src", "include", "apps", "CMakeLists.txt", "cmake")


# --- provenance --------------------------------------------------------------------------------------------------


def _git(repo: pathlib.Path, *args: str) -> str:
    r = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def head_commit(repo: pathlib.Path = ROOT) -> str:
    """HEAD's short hash, or 'unknown' outside a git checkout."""
    return _git(repo, "rev-parse", "--short", "HEAD") or "unknown"


def dirty_sources(repo: pathlib.Path = ROOT) -> list[str]:
    """The C++ source paths that differ from HEAD (modified, staged or untracked), as git prints them."""
    out = _git(repo, "status", "--porcelain", "--", *SOURCE_PATHS)
    return [line[3:] for line in out.splitlines() if line.strip()]


def commit_stamp(repo: pathlib.Path = ROOT) -> str:
    """HEAD's short hash, with -dirty when the C++ sources differ from it."""
    return head_commit(repo) + ("-dirty" if dirty_sources(repo) else "")


def newest_source_mtime(repo: pathlib.Path = ROOT, paths: Sequence[str] = SOURCE_PATHS) -> float:
    """The newest modification time of a tracked file under `paths` (by default every C++ source path)."""
    names = _git(repo, "ls-files", "--", *paths).splitlines()
    return max((p.stat().st_mtime for p in (repo / n for n in names) if p.is_file()), default=0.0)


# The build's own description: a change here (flags, definitions) can change every tool, and no tool names these
# files among its inputs.
BUILD_FILES = ("CMakeLists.txt", "cmake")


class ProvenanceError(RuntimeError):
    """A row could not be tied to a clean commit."""


def _ninja_lines(build: pathlib.Path, *args: str) -> list[str] | None:
    """`ninja -C build -t ...`'s output lines, or None when ninja cannot answer (no ninja, not a Ninja build)."""
    if not (build / "build.ninja").is_file() or not shutil.which("ninja"):
        return None
    try:
        r = subprocess.run(["ninja", "-C", str(build), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.splitlines() if r.returncode == 0 else None


def tool_sources(build: pathlib.Path, tool: str, repo: pathlib.Path = ROOT) -> list[pathlib.Path] | None:
    """The files under the C++ source paths of `repo` that `tool` is built from, as the Ninja build knows them: its
    transitive inputs (`ninja -t inputs`) and the headers its objects included when last compiled (`ninja -t deps`).
    None when the build cannot say (not a Ninja build, ninja missing, an unknown target)."""
    build = pathlib.Path(os.path.abspath(build))
    inputs = _ninja_lines(build, "-t", "inputs", tool)
    if inputs is None:
        return None
    objects = [i for i in inputs if i.endswith((".o", ".obj"))]
    deps = _ninja_lines(build, "-t", "deps", *objects) if objects else []
    if deps is None:
        return None
    # An object includes thousands of LibTorch headers: select by path prefix before touching the file system.
    bases = {os.path.abspath(repo), os.path.realpath(repo)}
    roots = tuple(os.path.join(b, s) for b in bases for s in SOURCE_PATHS)
    found: set[pathlib.Path] = set()
    inside = tuple(r + os.sep for r in roots)
    build_dirs = tuple(b + os.sep for b in {os.path.abspath(build), os.path.realpath(build)})
    for line in {x.strip() for x in inputs + [d for d in deps if d.startswith(" ")]} - {""}:
        f = os.path.normpath(os.path.join(build, line))
        if f.startswith(build_dirs):  # the build's own paths: some link into the sources (layered include dirs)
            f = os.path.realpath(f)
        if (f in roots or f.startswith(inside)) and os.path.isfile(f):
            found.add(pathlib.Path(os.path.realpath(f)))
    return sorted(found)


def snapshot_tools(build: pathlib.Path, tools: Sequence[str], dest_root: pathlib.Path,
                   repo: pathlib.Path = ROOT) -> tuple[pathlib.Path, str]:
    """Copies `tools` from `build` into dest_root/<commit>/ and returns (that folder, the commit). Refuses
    (ProvenanceError) when the C++ sources differ from HEAD or a tool is older than a source it is built from (in a
    Ninja build its own inputs and the CMake files, else any C++ source): such binaries cannot be rebuilt from the
    commit the row would name. An existing snapshot of the commit is reused."""
    dirty = dirty_sources(repo)
    if dirty:
        raise ProvenanceError(f"the C++ sources differ from HEAD ({', '.join(dirty[:3])}"
                              f"{', ...' if len(dirty) > 3 else ''}): commit or stash them, rebuild, and start again")
    commit = head_commit(repo)
    if commit == "unknown":
        raise ProvenanceError(f"{repo} is not a git checkout: rows could not name a commit")
    dest = dest_root / commit
    if all((dest / t).is_file() for t in tools):
        return dest, commit
    newest: dict[tuple[str, ...], float] = {}  # the newest tracked file under some paths, read once

    def newest_of(paths: tuple[str, ...]) -> float:
        if paths not in newest:
            newest[paths] = newest_source_mtime(repo, paths)
        return newest[paths]

    for t in tools:
        src = build / t
        if not src.is_file():
            raise ProvenanceError(f"{src} does not exist: build first (bash scripts/setup.sh)")
        built = src.stat().st_mtime
        # A Ninja build says what each tool is built from, so an edit to a source a tool does not use (a module
        # that links none of it, a GPU-only file) does not make the tool look stale; other builds are held against
        # the newest C++ source of the whole tree.
        own = tool_sources(build, t, repo)
        if own is not None:
            late = [f for f in own if f.stat().st_mtime > built]
            if late:
                name = os.path.relpath(late[0], os.path.realpath(repo))
                raise ProvenanceError(f"{src} is older than {name}, which it is built from: rebuild "
                                      f"(cmake --build {build}) and start again")
            if built < newest_of(BUILD_FILES):
                raise ProvenanceError(f"{src} is older than the CMake files (CMakeLists.txt, cmake/): rebuild "
                                      f"(cmake --build {build}) and start again (when the build has nothing to do, "
                                      f"the edit did not reach this tool: touch it)")
        elif built < newest_of(SOURCE_PATHS):
            raise ProvenanceError(f"{src} is older than the newest C++ source: rebuild "
                                  f"(cmake --build {build}) and start again")
    tmp = dest_root / f".{commit}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for t in tools:
        shutil.copy2(build / t, tmp / t)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest, commit


DIRTY = "-dirty"  # the end of a row's commit when its binaries were built from a tree that differed from it


def dirty_note(commits: Sequence[str]) -> str:
    """'' when every row names a clean commit; else 'K of N rows from a dirty build (commit ending in -dirty), not
    reproducible from a commit' (docs/design.md#statistics-protocol, provenance)."""
    k = sum(str(c).endswith(DIRTY) for c in commits)
    if not k:
        return ""
    return (f"{k} of {len(commits)} row{'s' * (len(commits) != 1)} from a dirty build (commit ending in {DIRTY}), "
            "not reproducible from a commit")


def cpu_name() -> str:
    """The CPU's model name and how many CPUs this process may use."""
    name = "unknown CPU"
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{name} ({cpu_count()} cpus)"


def retrying(fn: Callable[[], T], say: Callable[[str], None], tries: int = 30, wait: float = 60.0,
             tool_tries: int = 3) -> T:
    """fn(), again after `wait` seconds when a binary could not be started (OSError: up to `tries` times) or a tool
    failed (ToolError: up to `tool_tries` times). Finished work is kept between tries: the studies resume."""
    oserrors = toolerrors = 0
    while True:
        try:
            return fn()
        except OSError as e:
            oserrors += 1
            if oserrors >= tries:
                raise
            say(f"could not start a tool ({e}); trying again in {wait:g} s ({oserrors} of {tries})")
        except ToolError as e:
            toolerrors += 1
            if toolerrors >= tool_tries:
                raise
            say(f"{e}; trying again in {wait:g} s ({toolerrors} of {tool_tries})")
        time.sleep(wait)


# --- rows --------------------------------------------------------------------------------------------------------


class Table:
    """A study's CSV: fixed fields, each with a type (int, float or str). Rows are dicts; the file is rewritten
    atomically for each appended row."""

    def __init__(self, path: pathlib.Path, fields: dict[str, type]):
        self.path, self.fields = path, dict(fields)

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with self.path.open(newline="", encoding="utf-8") as f:
            r = csv.DictReader(f)
            if tuple(r.fieldnames or ()) != tuple(self.fields):
                raise ValueError(f"{self.path}: header {r.fieldnames} is not {list(self.fields)}")
            rows = []
            for n, row in enumerate(r, start=2):
                try:
                    rows.append({k: kind(row[k]) for k, kind in self.fields.items()})
                except (TypeError, ValueError) as e:
                    raise ValueError(f"{self.path}:{n}: {e}") from None
        return rows

    def line(self, row: dict) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([row[k] for k in self.fields])
        return buf.getvalue()

    def check(self, row: dict) -> None:
        missing = [k for k in self.fields if k not in row]
        if missing:
            raise ValueError(f"{self.path}: a row without {missing}")

    def write(self, rows: Sequence[dict]) -> None:
        """Replaces the file's rows with `rows` (atomically)."""
        for row in rows:
            self.check(row)
        write_atomic(self.path, ",".join(self.fields) + "\n" + "".join(self.line(r) for r in rows))

    def append(self, row: dict) -> None:
        self.check(row)
        old = self.path.read_text(encoding="utf-8") if self.path.is_file() else ",".join(self.fields) + "\n"
        if not old.endswith("\n"):
            old += "\n"
        write_atomic(self.path, old + self.line(row))


def update_section(doc: pathlib.Path, name: str, section: str) -> None:
    """Replaces the text between `<!-- name:begin -->` and `<!-- name:end -->` in `doc` with `section`."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = doc.read_text(encoding="utf-8")
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{doc}: needs one {begin} before one {end}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    write_atomic(doc, f"{head}{begin}\n{section}\n{end}{tail}")


def section_of(doc: pathlib.Path, name: str) -> str:
    """The text between a page's markers (what update_section wrote)."""
    text = doc.read_text(encoding="utf-8")
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    if begin not in text or end not in text:
        raise ValueError(f"{doc}: the markers {begin} / {end} are missing")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


# --- the real-model studies' inputs ------------------------------------------------------------------------------


def fetch_gguf() -> str:
    """The path of SmolLM2-135M-Instruct's GGUF file, fetched once into .cache/models/."""
    r = subprocess.run(["bash", str(ROOT / "scripts" / "fetch_smollm2.sh")], stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit("real_model: scripts/fetch_smollm2.sh failed")
    return r.stdout.strip()


def heldout_prose() -> str:
    """Austen's Persuasion from the small corpus (built by scripts/make_corpus.sh --small when missing)."""
    corpus = pathlib.Path(os.environ.get("DROPE_CORPUS_DIR", ROOT / "runs" / "corpus"))
    found = sorted(corpus.glob("*/heldout/persuasion.txt"))
    if not found:
        r = subprocess.run(["bash", str(ROOT / "scripts" / "make_corpus.sh"), "--small"], stdout=sys.stderr)
        found = sorted(corpus.glob("*/heldout/persuasion.txt"))
        if r.returncode != 0 or not found:
            raise SystemExit("real_model: scripts/make_corpus.sh --small did not write heldout/persuasion.txt")
    return str(found[0])


# --- statistics --------------------------------------------------------------------------------------------------


def slope(xs: Sequence[float], ys: Sequence[float]) -> dict | None:
    """The least-squares slope of ys on xs with its standard error, n − 2 degrees of freedom, the 95 % and 90 % t
    intervals and the one- and two-sided p-values against 0; None with fewer than three points or one distinct x."""
    n = len(xs)
    if n != len(ys):
        raise ValueError(f"slope: {n} x values and {len(ys)} y values")
    if n < 3 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    resid = [y - my - b * (x - mx) for x, y in zip(xs, ys)]
    df = n - 2
    se = math.sqrt(sum(r * r for r in resid) / df / sxx)
    t95, t90 = stats.t_quantile(0.975, df), stats.t_quantile(0.95, df)
    out = {"slope": b, "se": se, "n": n, "df": df, "ci95": (b - t95 * se, b + t95 * se),
           "ci90": (b - t90 * se, b + t90 * se)}
    if se == 0:
        out.update(p_less=0.0 if b < 0 else 1.0, p_greater=0.0 if b > 0 else 1.0, p_two=0.0 if b else 1.0)
        return out
    from scipy import stats as sps

    t = b / se
    out.update(t=t, p_less=float(sps.t.cdf(t, df)), p_greater=float(sps.t.sf(t, df)),
               p_two=float(2 * sps.t.sf(abs(t), df)))
    return out


def slope_verdict(fit: dict | None, margin: float, alpha: float = 0.05) -> list[str]:
    """The directional-and-equivalence verdict on a slope: 'shrinks' (the (1 − alpha) interval below 0, i.e. the
    one-sided test at alpha/2), 'grows' (above 0), 'flat' (the (1 − 2·alpha) interval inside ±margin: TOST at alpha);
    'shrinks' or 'grows' can come with 'flat'; ['inconclusive'] when none holds. The intervals are those of `slope`
    (alpha 0.05 only)."""
    if alpha != 0.05:
        raise ValueError("slope_verdict: the intervals of `slope` are for alpha = 0.05")
    if fit is None:
        return ["inconclusive"]
    out = []
    lo95, hi95 = fit["ci95"]
    lo90, hi90 = fit["ci90"]
    if hi95 < 0:
        out.append("shrinks")
    if lo95 > 0:
        out.append("grows")
    if -margin < lo90 and hi90 < margin:
        out.append("flat")
    return out or ["inconclusive"]
