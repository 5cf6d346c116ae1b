"""The steps the studies share: staged progress, running the tools, training runs that resume, evaluations that
are reused, side-by-side tables, and the one task runner (Driver.parallel; Driver.work for resumable tasks that
several workers or processes claim on one directory)."""
from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import fcntl
import fnmatch
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import yaml

from . import results
from .atomic import write_atomic
from .cli import env_int

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What a tool's stdout shows: everything, nothing, the lines matching a pattern, or the last n lines.
Show = str | re.Pattern | int
ALL, NONE = "all", "none"
T = TypeVar("T")
_task = threading.local()  # the tag of the parallel task the current thread runs (Driver.parallel)


def cpu_count() -> int:
    """CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def jobs_knob(env: dict[str, str], name: str) -> int:
    """A worker-count environment knob: an integer in 1..256, by default half the CPUs this process may use (at
    least 1), so that each job's tools run two threads: on a 2-core machine two one-thread trainings side by side
    were slower than the same two one after the other on two threads (docs/results.md). ASCII digits only
    (cli.env_int): a UsageError (a ValueError) names `name` otherwise."""
    return env_int(name, max(1, cpu_count() // 2), 1, 256, env)


class ToolError(RuntimeError):
    """A tool exited non-zero (its own message is already on stderr)."""

    def __init__(self, tool: str, returncode: int):
        super().__init__(f"{tool} exited {returncode}")
        self.returncode = returncode


@dataclass(frozen=True)
class Method:
    """One evaluated method: a label, a model directory and drope-eval options (e.g. --rope-scaling pi --factor 2)."""

    name: str
    model: pathlib.Path
    options: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        """The file-name form of the label: lower case, '+' → '-'."""
        return self.name.lower().replace("+", "-")


def checkpoint(run_dir: pathlib.Path, step: int) -> pathlib.Path:
    """The checkpoint directory drope-train writes at `step`."""
    return run_dir / "checkpoints" / f"step-{step:08d}"


def has_checkpoint(run_dir: pathlib.Path) -> bool:
    """Whether run_dir holds any drope-train checkpoint (checkpoints/step-*)."""
    return any((run_dir / "checkpoints").glob("step-*"))


def seed_from_checkpoint(src: pathlib.Path, run_dir: pathlib.Path) -> bool:
    """Copies the checkpoint directory `src` into the fresh run `run_dir` (checkpoints/<src's name>, renamed into
    place whole, so a killed copy leaves nothing drope-train would read), for drope-train --resume to continue
    from it. Nothing happens when run_dir already holds a checkpoint or `src` is not a finished checkpoint."""
    ckpts = run_dir / "checkpoints"
    tmp = ckpts / f".seed-{src.name}.partial"
    if tmp.exists():  # a copy we started and did not finish
        shutil.rmtree(tmp)
    if has_checkpoint(run_dir) or not (src / "model.safetensors").is_file():
        return False
    ckpts.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, tmp)
    os.rename(tmp, ckpts / src.name)
    return True


def train_state(run_dir: pathlib.Path, steps: int) -> str:
    """'finished' (the final checkpoint exists), 'killed' (some checkpoint exists: resume) or 'fresh'."""
    if (checkpoint(run_dir, steps) / "model.safetensors").is_file():
        return "finished"
    if has_checkpoint(run_dir):
        return "killed"
    return "fresh"


def config_int(path: str | pathlib.Path, section: str, key: str) -> int:
    """section.key of a drope-train YAML config: a positive integer."""
    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    value = doc.get(section, {}).get(key) if isinstance(doc, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{path}: {section}.{key} must be a positive integer, got {value!r}")
    return value


def config_steps(path: str | pathlib.Path) -> int:
    """train.steps of a drope-train YAML config."""
    return config_int(path, "train", "steps")


def remove_outputs(run: pathlib.Path, patterns: Sequence[str]) -> None:
    """DROPE_FORCE: removes the entries of `run` whose names match `patterns` (what a pipeline writes there),
    nothing else; a symbolic link is removed, not followed."""
    if not run.is_dir():
        return
    for p in run.iterdir():
        if any(fnmatch.fnmatchcase(p.name, pattern) for pattern in patterns):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()


def concat_tables(parts: Sequence[pathlib.Path], out: pathlib.Path) -> str:
    """Writes the Markdown tables one after another, an empty line between them; returns the text."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in parts)
    out.write_text(text, encoding="utf-8")
    return text


def run_logged(cmd: Sequence[object], log: pathlib.Path, env: dict | None = None) -> None:
    """Runs `cmd` with its stdout and stderr appended to `log` (after a `$ command` line); raises ToolError
    naming the program when it exits non-zero."""
    args = [str(a) for a in cmd]
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"$ {shlex.join(args)}\n")
        f.flush()
        rc = subprocess.run(args, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    if rc != 0:
        raise ToolError(pathlib.Path(args[0]).name, rc)


@contextlib.contextmanager
def claim(path: pathlib.Path) -> Iterator[bool]:
    """An exclusive flock on `path` without waiting: yields True when this caller holds it. Each call opens the file
    anew, so the claim excludes other threads of this process as well as other processes. The lock goes with the
    process (a killed process's task is free again); the file stays."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: pathlib.Path) -> Iterator[None]:
    """An exclusive flock on `path`, waiting for it: for a read-modify-write that other processes also do (a study's
    CSV shared by several workers). The lock goes with the process; the file stays."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Task:
    """One resumable piece of work for Driver.work: `done` says whether its outputs exist, `run` makes them. It
    starts once the tasks of the same list named in `deps` are done."""

    key: str  # its lock and timing file name
    deps: tuple[str, ...]
    done: Callable[[], bool]
    run: Callable[[], None]


class Driver:
    """Runs the tools of one build directory for a pipeline named `name`, printing timed stage headings. `jobs`
    tasks run side by side (parallel, work); each tool a task starts runs `threads` threads (default: the CPUs
    shared out among the jobs)."""

    def __init__(self, name: str, bin_dir: pathlib.Path, width: int, jobs: int = 1, threads: int | None = None):
        self.name, self.bin_dir, self.width, self.jobs, self.threads = name, bin_dir, width, max(1, jobs), threads
        self.t0 = time.monotonic()
        self.print_lock = threading.Lock()
        self.stopping = threading.Event()  # set by parallel on the first failure
        self.line_buffered = ["stdbuf", "-oL"] if shutil.which("stdbuf") else []  # progress when piped

    def elapsed(self) -> int:
        """Whole seconds since the pipeline started."""
        return int(time.monotonic() - self.t0)

    def stage(self, msg: str) -> None:
        print(f"\n\033[1m[{self.name} {self.elapsed():{self.width}d}s] {msg}\033[0m", flush=True)

    def say(self, text: str) -> None:
        """Prints one or more lines; inside a parallel task each line starts with the task's tag."""
        tag = getattr(_task, "tag", None)
        if tag is not None:
            text = "".join(f"[{tag}] {line}" for line in text.splitlines(keepends=True))
        with self.print_lock:
            print(text, end="" if text.endswith("\n") else "\n", flush=True)

    def tool(self, name: str, *args: object, show: Show = ALL, line_buffered: bool = False) -> None:
        """Runs bin_dir/name; stderr passes through, stdout as `show` says. Raises ToolError on failure. Inside a
        parallel task the tool runs with the task's share of the CPUs or `threads` (OMP_NUM_THREADS) and its shown
        lines are tagged."""
        cmd = [str(self.bin_dir / name), *map(str, args)]
        if line_buffered:
            cmd = self.line_buffered + cmd
        env = None
        if getattr(_task, "tag", None) is not None:
            env = dict(os.environ, OMP_NUM_THREADS=str(self.threads or max(1, cpu_count() // self.jobs)))
            if show == ALL:
                show = re.compile("")
        sys.stdout.flush()
        if show == ALL:
            rc = subprocess.run(cmd).returncode
        elif show == NONE:
            rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, env=env).returncode
        else:
            last: collections.deque[str] = collections.deque(maxlen=show if isinstance(show, int) else None)
            with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, errors="replace", env=env) as p:
                for line in p.stdout:
                    if isinstance(show, int):
                        last.append(line)
                    elif show.search(line):
                        self.say(line)
                rc = p.wait()
            if last:
                self.say("".join(last))
        if rc != 0:
            raise ToolError(name, rc)

    def parallel(self, tasks: Sequence[tuple[str, Callable[[], T]]]) -> list[T]:
        """Runs the (tag, function) tasks on `jobs` worker threads, each tool they start with cpus / jobs
        threads, and returns their results in task order. With one job, or one task, they run here in order.
        The first failure (or an interrupt) cancels the tasks not yet started, sets `stopping` for those that
        loop, and is raised once the running ones end."""
        self.stopping.clear()
        if self.jobs == 1 or len(tasks) <= 1:
            return [fn() for _, fn in tasks]

        def call(tag: str, fn: Callable[[], T]) -> T:
            _task.tag = tag
            try:
                return fn()
            except BaseException:
                self.stopping.set()
                raise
            finally:
                _task.tag = None

        ex = concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs)
        try:
            futures = [ex.submit(call, tag, fn) for tag, fn in tasks]
            return [f.result() for f in futures]
        except BaseException:
            self.stopping.set()
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)

    def work(self, tasks: Sequence[Task], state_dir: pathlib.Path, poll: float) -> int:
        """Runs every task not yet done, in list order once its dependencies are done, until all are done, on up to
        `jobs` workers (parallel). A worker claims a task with state_dir/locks/<key>.lock (claim), so that no other
        worker and no other process working on the same directory runs it too, and records its wall time in
        state_dir/timing/<key>.json. While others hold the rest a worker looks again every `poll` seconds. A
        failure stops the other workers after their current task and is raised. Returns how many tasks ran here."""
        (state_dir / "locks").mkdir(parents=True, exist_ok=True)
        (state_dir / "timing").mkdir(parents=True, exist_ok=True)
        workers = max(1, min(self.jobs, sum(not t.done() for t in tasks)))
        ran = self.parallel([(f"worker {i + 1}", lambda: self._work_loop(tasks, state_dir, poll))
                             for i in range(workers)])
        return sum(ran)

    def _work_loop(self, tasks: Sequence[Task], state_dir: pathlib.Path, poll: float) -> int:
        """One worker of `work`: claims and runs the first runnable task, until none is left or `stopping`."""
        by_key = {t.key: t for t in tasks}
        ran, waiting = 0, False
        while not self.stopping.is_set():
            pending = [t for t in tasks if not t.done()]
            if not pending:
                break
            progressed = False
            for t in pending:
                if not all(by_key[d].done() for d in t.deps if d in by_key):
                    continue
                with claim(state_dir / "locks" / f"{t.key}.lock") as mine:
                    if not mine or t.done():
                        continue
                    t0 = time.monotonic()
                    t.run()
                    seconds = time.monotonic() - t0
                    if not t.done():
                        raise RuntimeError(f"{t.key}: finished without its outputs")
                    write_atomic(state_dir / "timing" / f"{t.key}.json",
                                 json.dumps({"task": t.key, "seconds": round(seconds, 1)}, indent=2) + "\n")
                    self.say(f"{t.key}: done in {seconds:.0f} s")
                ran, progressed, waiting = ran + 1, True, False
                break
            if not progressed:
                if not waiting:
                    self.say(f"waiting for {len(pending)} task(s) held by other workers or processes")
                    waiting = True
                self.stopping.wait(poll)
        return ran

    def train(self, config: str | pathlib.Path, run_dir: pathlib.Path, steps: int, overrides: Sequence[str] = (),
              fresh_overrides: Sequence[str] = (), show: Show = ALL) -> str:
        """drope-train `config` into run_dir unless finished: a killed run resumes, a fresh one starts.
        `fresh_overrides` (e.g. run.init) are settings only a fresh start reads; a resumed run passes them too,
        unchanged, because drope-train refuses a resume whose settings differ from the checkpoint's. Deletes
        nothing: drope-train rewrites an unfinished first attempt's log itself. Returns the state found."""
        state = train_state(run_dir, steps)
        if state == "finished":
            return state
        args = [config, "--set", f"run.out_dir={run_dir}"]
        for o in overrides:
            args += ["--set", o]
        for o in fresh_overrides:
            args += ["--set", o]
        if state == "killed":
            args.append("--resume")
        self.tool("drope-train", *args, show=show, line_buffered=True)
        return state

    def evaluate(self, command: str, method: Method, out: pathlib.Path, args: Sequence[object], kind: str,
                 label: str | None = None, show: Show = NONE) -> tuple[dict, bool]:
        """drope-eval `command` for `method` into the prefix `out`, unless out.json already holds a valid `kind`
        result. Returns the results document and whether it was computed now."""
        done = out.with_name(out.name + ".json")
        computed = not done.is_file()
        if computed:
            self.tool("drope-eval", command, "--model", method.model, *method.options, "--label", label or method.name,
                      *args, "--out", out, show=show)
        return results.load(done, kind), computed

    def compare(self, files: Sequence[pathlib.Path], out: pathlib.Path, title: str, plot: str | None = None) -> None:
        """drope-eval compare: one side-by-side table (out.md/.json/.csv); with `plot` (a metric, e.g. far) also
        out.png/.svg: that summary metric vs length per label, files sharing a label drawn as seeds."""
        self.tool("drope-eval", "compare", *files, *(("--plot", plot) if plot else ()), "--out", out, "--title", title,
                  show=NONE)


def run_pipeline(name: str, body) -> int:
    """Runs body() with line-buffered stdout; a failed tool or a bad file ends it with a one-line message."""
    sys.stdout.reconfigure(line_buffering=True)
    try:
        return body()
    except ToolError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return e.returncode
    except (results.ResultsError, ValueError, OSError, yaml.YAMLError) as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 1
