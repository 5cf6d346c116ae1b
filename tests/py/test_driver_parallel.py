"""Driver.parallel: results in task order, each tool with its share of the CPUs, tagged output, the first failure
raised and the tasks not yet started cancelled. Driver.work on top of it: resumable tasks claimed with lock files
(excluding other processes and other workers), run once each in dependency order."""
import json
import multiprocessing
import os
import sys
import threading
import time

import pytest

from drope_scripts import driver
from drope_scripts.driver import Driver, ToolError

TOOL = """#!{python}
import os, sys, time
with open(os.environ["FAKE_CALLS"], "a") as f:
    f.write(f"{{sys.argv[1]}} threads={{os.environ.get('OMP_NUM_THREADS')}}\\n")
time.sleep(float(sys.argv[2]))
print(f"line of {{sys.argv[1]}}")
sys.exit(int(sys.argv[3]))
"""


@pytest.fixture
def tool(tmp_path, monkeypatch):
    (tmp_path / "t").write_text(TOOL.format(python=sys.executable))
    (tmp_path / "t").chmod(0o755)
    calls = tmp_path / "calls.txt"
    calls.write_text("")
    monkeypatch.setenv("FAKE_CALLS", str(calls))
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setattr(driver, "cpu_count", lambda: 4)
    return tmp_path, calls


def test_results_come_in_task_order_with_a_share_of_the_cpus(tool, capsys):
    bin_dir, calls = tool
    d = Driver("t", bin_dir, width=2, jobs=2)
    seen = []

    def task(i: int, sleep: float):
        d.tool("t", f"task{i}", sleep, 0, show=driver.ALL)
        seen.append(threading.current_thread().name)
        return i * 10

    assert d.parallel([(f"job{i}", lambda i=i, s=s: task(i, s)) for i, s in enumerate((0.6, 0.0, 0.0))]) == [0, 10, 20]
    lines = sorted(calls.read_text().splitlines())
    assert lines == ["task0 threads=2", "task1 threads=2", "task2 threads=2"]  # 4 cpus / 2 jobs
    out = capsys.readouterr().out
    assert "[job1] line of task1\n" in out and "[job0] line of task0\n" in out
    assert out.index("[job1]") < out.index("[job0]")  # side by side: job1 ended while job0 still slept
    assert len(set(seen)) == 2


def test_one_job_runs_here_in_order_with_the_callers_environment(tool, capsys):
    bin_dir, calls = tool
    d = Driver("t", bin_dir, width=2, jobs=1)
    assert d.parallel([(f"job{i}", lambda i=i: d.tool("t", f"task{i}", 0, 0) or i) for i in range(3)]) == [0, 1, 2]
    assert calls.read_text().splitlines() == ["task0 threads=7", "task1 threads=7", "task2 threads=7"]
    assert "[job" not in capsys.readouterr().out


def test_the_first_failure_is_raised_and_later_tasks_never_start(tool):
    bin_dir, calls = tool
    d = Driver("t", bin_dir, width=2, jobs=2)
    tasks = [("bad", lambda: d.tool("t", "bad", 0, 3, show=driver.NONE)),
             ("slow", lambda: d.tool("t", "slow", 0.8, 0, show=driver.NONE))]
    tasks += [(f"late{i}", lambda i=i: d.tool("t", f"late{i}", 0, 0, show=driver.NONE)) for i in range(4)]
    with pytest.raises(ToolError, match="t exited 3"):
        d.parallel(tasks)
    names = [line.split()[0] for line in calls.read_text().splitlines()]
    assert "bad" in names and "slow" in names
    assert sum(n.startswith("late") for n in names) <= 1  # the worker freed by "bad" may have taken one


def test_jobs_knob():
    assert driver.jobs_knob({"J": "3"}, "J") == 3
    assert driver.jobs_knob({}, "J") == max(1, driver.cpu_count() // 2)
    for bad in ("0", "x", "257", "1.5", " 2"):
        with pytest.raises(ValueError, match=f"J must be an integer in 1..256, got '{bad}'"):
            driver.jobs_knob({"J": bad}, "J")
    assert os.environ.get("J") is None


def _hold(path, ready, release):
    with driver.claim(path) as mine:
        ready.put(mine)
        release.get()


def test_claims_exclude_other_processes_and_threads(tmp_path):
    lock = tmp_path / "t.lock"
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_hold, args=(lock, ready, release))
    p.start()
    assert ready.get(timeout=30) is True
    with driver.claim(lock) as mine:
        assert mine is False  # held by the other process
    release.put(None)
    p.join(30)
    with driver.claim(lock) as mine:
        assert mine is True  # free again once it let go (or died)
        with driver.claim(lock) as again:
            assert again is False  # a second claim in this process (another worker thread) is refused


def _tasks(done, order, keys_deps, sleep=0.0, fail=None):
    def task(key, deps):
        def run():
            order.append(key)
            time.sleep(sleep / 3 if key == fail else sleep)
            if key == fail:
                raise RuntimeError(f"{key} failed")
            done.add(key)
        return driver.Task(key, deps, lambda: key in done, run)
    return [task(k, d) for k, d in keys_deps]


@pytest.mark.parametrize("jobs", [1, 2])
def test_work_runs_each_task_once_in_dependency_order(tmp_path, jobs):
    done, order = set(), []
    tasks = _tasks(done, order, [("b", ("a",)), ("a", ()), ("c", ("b",)), ("x", ()), ("y", ("x",))], sleep=0.05)
    d = Driver("t", tmp_path, width=2, jobs=jobs)
    assert d.work(tasks, tmp_path, poll=0.01) == 5
    assert sorted(order) == ["a", "b", "c", "x", "y"]
    assert order.index("a") < order.index("b") < order.index("c") and order.index("x") < order.index("y")
    assert d.work(tasks, tmp_path, poll=0.01) == 0  # all done: nothing runs again
    assert json.loads((tmp_path / "timing" / "a.json").read_text())["task"] == "a"


def test_work_leaves_tasks_another_process_holds(tmp_path):
    done, order = set(), []
    tasks = _tasks(done, order, [("a", ()), ("b", ())])
    (tmp_path / "locks").mkdir()
    ctx = multiprocessing.get_context("fork")
    ready, release = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_hold, args=(tmp_path / "locks" / "a.lock", ready, release))
    p.start()
    assert ready.get(timeout=30) is True
    # the other process "finishes" a while later: the worker runs b, waits, then finds a done
    threading.Timer(0.3, lambda: (done.add("a"), release.put(None))).start()
    assert Driver("t", tmp_path, width=2).work(tasks, tmp_path, poll=0.05) == 1
    p.join(30)
    assert order == ["b"]


def test_a_failing_task_stops_the_other_workers(tmp_path):
    done, order = set(), []
    tasks = _tasks(done, order, [("bad", ()), ("slow", ())] + [(f"late{i}", ()) for i in range(4)], sleep=0.3,
                   fail="bad")
    with pytest.raises(RuntimeError, match="bad failed"):
        Driver("t", tmp_path, width=2, jobs=2).work(tasks, tmp_path, poll=0.01)
    assert "bad" in order and "slow" in order
    assert not any(k.startswith("late") for k in order)  # the worker that ran "slow" stopped after it
