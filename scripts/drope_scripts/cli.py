"""The inputs of the scripts and studies, checked before any work starts (docs/robustness.md#scripts-and-studies):
a bad flag or environment variable ends the program with one line `NAME: message` naming it and what was
expected, exit status 2, no traceback.

Numbers, from flags and from the environment alike, are plain ASCII decimals (`[0-9]`, and for floats one `.`
and an exponent): str.isdigit() and int() also take other Unicode digits (DROPE_REPRO_STEPS=² passes isdigit()
and fails int(); int('١٢') is 12), and float() takes 'inf', 'nan' and '1_0'. Floats are finite. Directories the
program writes into (--out) may not be existing files, files it writes may not be directories, inputs must exist,
and a build directory (--build, or --bin) must exist and hold the tools the program runs.

Light on purpose (no third-party imports): the studies parse their arguments with it before anything heavy runs.
"""
from __future__ import annotations

import argparse
import math
import os
import pathlib
import re
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

ROOT = pathlib.Path(__file__).resolve().parents[2]
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


class UsageError(ValueError):
    """A bad flag or environment variable; its message names it (one line, exit 2)."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line `name: message` and exit 2 (argparse's own print the usage
    first). `check(fn, ...)` runs a checker of this module and turns its UsageError into such an error."""

    def __init__(self, name: str, **kwargs):
        super().__init__(**kwargs)
        self.name = name

    def error(self, message: str):
        self.exit(2, f"{self.name}: {message}\n")

    def check(self, fn: Callable, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError as e:
            self.error(str(e))


# ---- numbers -------------------------------------------------------------------------------------------------

def _bounds(lo: float | None, hi: float | None, lo_open: bool = False, hi_open: bool = False,
            integer: bool = False) -> str:
    """' in 1..256', ' >= 0', ' in (0, 1]', ... for a message."""
    if integer:
        if lo is not None and hi is not None:
            return f" in {lo}..{hi}"
        if lo is not None:
            return " > 0" if lo == 1 else f" >= {lo}"
        return f" <= {hi}" if hi is not None else ""
    if lo is not None and hi is not None:
        return f" in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    if lo is not None:
        return f" {'>' if lo_open else '>='} {lo:g}"
    if hi is not None:
        return f" {'<' if hi_open else '<='} {hi:g}"
    return ""


def _int_expected(lo: int | None, hi: int | None) -> str:
    if lo == 1 and hi is None:
        return "a positive integer"
    return "an integer" + _bounds(lo, hi, integer=True)


def _float_expected(lo, hi, lo_open, hi_open) -> str:
    return "a finite number" + _bounds(lo, hi, lo_open, hi_open)


def ascii_digits(text: str) -> bool:
    """Whether `text` is one or more ASCII digits (str.isdigit() is true for '²' and '١' too)."""
    return isinstance(text, str) and re.fullmatch(r"[0-9]+", text) is not None


def _int_or_none(text: str, lo: int | None, hi: int | None) -> int | None:
    if not isinstance(text, str) or not _INT.fullmatch(text):
        return None
    v = int(text)
    return v if (lo is None or v >= lo) and (hi is None or v <= hi) else None


def _float_or_none(text: str, lo, hi, lo_open, hi_open) -> float | None:
    if not isinstance(text, str) or not _FLOAT.fullmatch(text):
        return None
    v = float(text)
    if not math.isfinite(v):
        return None
    if lo is not None and (v <= lo if lo_open else v < lo):
        return None
    if hi is not None and (v >= hi if hi_open else v > hi):
        return None
    return v


def to_int(text: str, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """`text` as an integer in [lo, hi]; UsageError naming `what` otherwise."""
    v = _int_or_none(text, lo, hi)
    if v is None:
        raise UsageError(f"{what} must be {_int_expected(lo, hi)}, got '{text}'")
    return v


def to_float(text: str, what: str, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
             hi_open: bool = False) -> float:
    """`text` as a finite float in the range; UsageError naming `what` otherwise."""
    v = _float_or_none(text, lo, hi, lo_open, hi_open)
    if v is None:
        raise UsageError(f"{what} must be {_float_expected(lo, hi, lo_open, hi_open)}, got '{text}'")
    return v


def int_type(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an ASCII integer in [lo, hi]."""
    def parse(text: str) -> int:
        v = _int_or_none(text, lo, hi)
        if v is None:
            raise argparse.ArgumentTypeError(f"expected {_int_expected(lo, hi)}, got '{text}'")
        return v
    return parse


def float_type(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
               hi_open: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite ASCII number in the range."""
    def parse(text: str) -> float:
        v = _float_or_none(text, lo, hi, lo_open, hi_open)
        if v is None:
            raise argparse.ArgumentTypeError(f"expected {_float_expected(lo, hi, lo_open, hi_open)}, got '{text}'")
        return v
    return parse


def int_list_type(lo: int | None = None, hi: int | None = None) -> Callable[[str], tuple[int, ...]]:
    """An argparse type: a comma list of ASCII integers in [lo, hi] (at least one)."""
    def parse(text: str) -> tuple[int, ...]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        values = [_int_or_none(t, lo, hi) for t in items]
        if not items or None in values:
            expected = "positive integers" if lo == 1 and hi is None else "integers" + _bounds(lo, hi, integer=True)
            raise argparse.ArgumentTypeError(f"expected a comma list of {expected}, got '{text}'")
        return tuple(values)
    return parse


def float_list_type(lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                    hi_open: bool = False) -> Callable[[str], tuple[float, ...]]:
    """An argparse type: a comma list of finite ASCII numbers in the range (at least one)."""
    def parse(text: str) -> tuple[float, ...]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        values = [_float_or_none(t, lo, hi, lo_open, hi_open) for t in items]
        if not items or None in values:
            expected = _float_expected(lo, hi, lo_open, hi_open).replace("a finite number", "finite numbers", 1)
            raise argparse.ArgumentTypeError(f"expected a comma list of {expected}, got '{text}'")
        return tuple(values)
    return parse


# ---- the environment -----------------------------------------------------------------------------------------

def env_int(name: str, default: int, lo: int | None = 1, hi: int | None = None,
            env: Mapping[str, str] | None = None) -> int:
    """The integer environment variable `name` (unset: `default`), ASCII digits in [lo, hi]; UsageError naming the
    variable otherwise (an empty value too). The one reader of numeric environment knobs in scripts/ and studies/."""
    v = (os.environ if env is None else env).get(name)
    return default if v is None else to_int(v, name, lo, hi)


def env_float(name: str, default: float, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
              hi_open: bool = False, env: Mapping[str, str] | None = None) -> float:
    """The finite float environment variable `name` (unset: `default`); UsageError naming it otherwise."""
    v = (os.environ if env is None else env).get(name)
    return default if v is None else to_float(v, name, lo, hi, lo_open, hi_open)


def env_switch(name: str, env: Mapping[str, str] | None = None) -> bool:
    """An on/off environment variable: 1 is on; unset, empty or 0 is off; anything else a UsageError."""
    v = (os.environ if env is None else env).get(name, "")
    if v not in ("", "0", "1"):
        raise UsageError(f"{name} must be 0 or 1, got '{v}'")
    return v == "1"


# ---- paths ---------------------------------------------------------------------------------------------------

def caller_cwd() -> pathlib.Path:
    """The directory the user ran the script from (scripts/run_python.sh runs the modules from the root)."""
    return pathlib.Path(os.environ.get("DROPE_CALLER_CWD") or os.getcwd())


def caller_path(p: str | os.PathLike) -> pathlib.Path:
    """A path as the user wrote it, made absolute against the caller's directory."""
    return (caller_cwd() / p).absolute()


def _blocking_ancestor(path: pathlib.Path) -> pathlib.Path | None:
    """The nearest existing ancestor of `path` when it is not a directory (mkdir would fail there)."""
    for parent in path.absolute().parents:
        if parent.exists() or parent.is_symlink():
            return None if parent.is_dir() else parent
    return None


def out_dir(path: pathlib.Path, what: str) -> pathlib.Path:
    """A directory the program creates or writes into: not an existing file, not below one."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {path}: exists and is not a directory")
    if path.is_symlink() and not path.exists():
        raise UsageError(f"{what} {path}: a dangling symbolic link")
    blocker = _blocking_ancestor(path)
    if blocker is not None:
        raise UsageError(f"{what} {path}: {blocker} is not a directory")
    return path


def out_file(path: pathlib.Path, what: str) -> pathlib.Path:
    """A file the program writes: not an existing directory, its directory creatable."""
    if path.is_dir():
        raise UsageError(f"{what} {path}: is a directory (expected a file to write)")
    blocker = _blocking_ancestor(path)
    if blocker is not None:
        raise UsageError(f"{what} {path}: {blocker} is not a directory")
    return path


def in_file(path: pathlib.Path, what: str) -> pathlib.Path:
    """A file the program reads: it exists and is a regular file."""
    if not path.exists():
        raise UsageError(f"{what} {path}: no such file")
    if not path.is_file():
        raise UsageError(f"{what} {path}: not a regular file")
    return path


def in_dir(path: pathlib.Path, what: str) -> pathlib.Path:
    """A directory the program reads: it exists and is a directory."""
    if not path.exists():
        raise UsageError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{what} {path}: not a directory")
    return path


def tools_in(path: pathlib.Path, what: str, tools: Sequence[str]) -> pathlib.Path:
    """A build directory: it exists and holds the executables `tools`."""
    in_dir(path, what)
    missing = [t for t in tools if not os.access(path / t, os.X_OK)]
    if missing:
        raise UsageError(f"{what} {path}: no {', '.join(missing)} there (build first: bash scripts/setup.sh)")
    return path


class _Recorded(argparse.Action):
    """Stores the value and which of the option's spellings the user typed (dest + '_flag')."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)
        setattr(namespace, self.dest + "_flag", option_string)


def add_build_option(ap: argparse.ArgumentParser, env_name: str | None, dest: str = "build") -> None:
    """--build DIR (also spelled --bin): the directory of the drope binaries (default $env_name, else build/)."""
    default = f"${env_name}, else build/" if env_name else "build/"
    ap.add_argument("--build", "--bin", dest=dest, type=pathlib.Path, action=_Recorded, default=None,
                    metavar="DIR", help=f"drope binaries (default {default})")


def env_path(name: str, default: str | os.PathLike) -> pathlib.Path:
    """A path from the environment (unset or empty: `default`). DROPE_BUILD_DIR and DROPE_RUN_DIR are read from
    the repository root, as scripts/setup.sh and make_corpus.sh read them; others (DROPE_BIN, the tests'
    variable) from the caller's directory."""
    v = os.environ.get(name) or str(default)
    return (ROOT / v).absolute() if name in ("DROPE_BUILD_DIR", "DROPE_RUN_DIR") else caller_path(v)


def build_dir(a: argparse.Namespace, env_name: str | None, dest: str = "build") -> tuple[pathlib.Path, str]:
    """The build directory of add_build_option and what names it in messages: the flag as typed (from the
    caller's directory), else the environment variable (env_path), else build/."""
    value = getattr(a, dest)
    if value is not None:
        return caller_path(value), getattr(a, dest + "_flag", None) or "--build"
    if env_name and os.environ.get(env_name):
        return env_path(env_name, ""), env_name
    return ROOT / "build", "the build directory"


def checked_run_dir(ap: Parser, out: str | os.PathLike | None, default: str) -> pathlib.Path:
    """A study's run directory: --out as typed (from the caller's directory), else $DROPE_RUN_DIR, else `default`
    (env_path); refused through `ap` (naming --out or DROPE_RUN_DIR) when it cannot be a directory we write."""
    run = caller_path(out) if out else env_path("DROPE_RUN_DIR", default)
    ap.check(out_dir, run, "--out" if out else "DROPE_RUN_DIR")
    return run


# ---- scripts/setup.sh after the arguments ----------------------------------------------------------------------

def run_pending_setup(name: str) -> None:
    """studies/run.sh leaves scripts/setup.sh to the studies that need it (DROPE_SETUP_PENDING=1) when the venv
    is ready, so that they check their arguments first; this runs it (once: the variable is removed). A failed
    set-up ends the program with its exit status."""
    if os.environ.pop("DROPE_SETUP_PENDING", "") != "1":
        return
    sys.stdout.flush()
    rc = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh")]).returncode
    if rc != 0:
        print(f"{name}: scripts/setup.sh exited {rc}", file=sys.stderr)
        raise SystemExit(rc)


def checked_build(ap: Parser, a: argparse.Namespace, env_name: str | None, tools: Sequence[str],
                  dest: str = "build") -> pathlib.Path:
    """The build directory (build_dir), checked: a --build given is an existing directory before anything else;
    then a pending scripts/setup.sh runs (run_pending_setup: it builds $DROPE_BUILD_DIR, else build/); then the
    directory must hold `tools`. Call it last in a parser: every other argument is checked before the set-up."""
    path, what = build_dir(a, env_name, dest)
    if getattr(a, dest) is not None:
        ap.check(in_dir, path, what)
    run_pending_setup(ap.name)
    ap.check(tools_in, path, what, tools)
    return path
