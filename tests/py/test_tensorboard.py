"""drope-train's TensorBoard events (train.tensorboard) read back with the `tensorboard` package's own
readers and compared, scalar by scalar, with log.jsonl; and `drope-train plot RUN_DIR`."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import BIN, expect_error, run_cli

pytest.importorskip("tensorboard")
from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.proto import event_pb2
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow

CFG = """run: {{name: tb, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2}}
train: {{steps: {steps}, log_every: 2, eval_every: 3, eval_batches: 1, checkpoint_every: 2, tensorboard: true}}
"""


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def train(cfg, *extra):
    subprocess.run([str(BIN / "drope-train"), cfg, "--quiet", *extra], check=True, env=env1(), timeout=240)


def log_lines(run_dir):
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def numeric(line):
    """The scalars a log line should give TensorBoard: every number but the step."""
    return {k: v for k, v in line.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool)}


def events_files(run_dir):
    return sorted(p for p in run_dir.iterdir() if p.name.startswith("events.out.tfevents."))


def read_events(path):
    """Every Event of one file via tensorboard's record reader, which checks both masked CRC-32Cs of each
    record and raises on a bad one (the loaders above it would stop quietly)."""
    reader = pywrap_tensorflow.PyRecordReader_New(str(path).encode())
    out = []
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            return out
        e = event_pb2.Event()
        e.ParseFromString(reader.record())
        out.append(e)


def test_events_mirror_log_jsonl_and_survive_resume(tmp_path):
    run_dir = tmp_path / "run"
    cfg = tmp_path / "tb.yaml"
    cfg.write_text(CFG.format(out=run_dir, steps=6))
    train(cfg)
    lines = log_lines(run_dir)
    assert any("val_ppl" in line for line in lines) and any("loss" in line for line in lines)
    [first] = events_files(run_dir)
    events = read_events(first)
    assert events[0].file_version == "brain.Event:2"
    assert events[1].session_log.status == event_pb2.SessionLog.START and events[1].step == 1
    scalars = events[2:]
    assert len(scalars) == len(lines)  # one event per log line, in order
    for e, line in zip(scalars, lines):
        assert e.step == line["step"]
        got = {v.tag: v.simple_value for v in e.summary.value}
        want = numeric(line)
        assert set(got) == set(want), (got, want)
        for k, v in want.items():
            assert np.float32(got[k]) == np.float32(v), (line["step"], k, got[k], v)
        assert e.wall_time > 1.6e9
    first_bytes = first.read_bytes()

    # A crash after step 6 was logged but before its checkpoint: resume from step 4 appends a new file; the old
    # one is left as it was, and TensorBoard drops its steps 5-6 (the START at step 5), as log.jsonl does.
    shutil.rmtree(run_dir / "checkpoints" / "step-00000006")
    train(cfg, "--resume")
    files = events_files(run_dir)
    assert len(files) == 2 and files[0] == first and first.read_bytes() == first_bytes
    second = read_events(files[1])
    assert second[1].session_log.status == event_pb2.SessionLog.START and second[1].step == 5

    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    lines = log_lines(run_dir)
    want = {}
    for line in lines:
        for k, v in numeric(line).items():
            want.setdefault(k, []).append((line["step"], np.float32(v)))
    assert sorted(acc.Tags()["scalars"]) == sorted(want)
    for tag, series in want.items():
        got = [(s.step, np.float32(s.value)) for s in acc.Scalars(tag)]
        assert got == series, tag
    assert [s.step for s in acc.Scalars("loss")] == [1, 2, 4, 6]  # step 1 is always logged
    assert "mfu" not in want  # train.peak_tflops is 0: no MFU in log.jsonl, none in TensorBoard


def test_mfu_is_mirrored_when_logged(tmp_path):
    run_dir = tmp_path / "mfu"
    cfg = tmp_path / "mfu.yaml"
    cfg.write_text(CFG.format(out=run_dir, steps=2))
    train(cfg, "--set", "train.peak_tflops=1.5")
    mfu = [(line["step"], np.float32(line["mfu"])) for line in log_lines(run_dir) if "mfu" in line]
    assert mfu
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={event_accumulator.SCALARS: 0})
    acc.Reload()
    assert [(s.step, np.float32(s.value)) for s in acc.Scalars("mfu")] == mfu


def test_two_ranks_one_events_file_from_rank_0(tmp_path):
    """Under torchrun only rank 0 writes; the data-parallel fields of log.jsonl are mirrored too."""
    run_dir = tmp_path / "dp"
    cfg = tmp_path / "dp.yaml"
    cfg.write_text(CFG.format(out=run_dir, steps=2))
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=2", "--master_port=29741",
                        str(BIN / "drope-train"), str(cfg), "--quiet"], env=env1(), capture_output=True, text=True,
                       timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    [events] = events_files(run_dir)
    lines = log_lines(run_dir)
    assert any("allreduce_buckets" in line for line in lines)
    scalars = read_events(events)[2:]
    assert len(scalars) == len(lines)
    for e, line in zip(scalars, lines):
        got = {v.tag: np.float32(v.simple_value) for v in e.summary.value}
        assert got == {k: np.float32(v) for k, v in numeric(line).items()}


def test_tensorboard_off_by_default_and_key_checked(tmp_path):
    run_dir = tmp_path / "off"
    cfg = tmp_path / "off.yaml"
    cfg.write_text(CFG.format(out=run_dir, steps=2).replace(", tensorboard: true", ""))
    train(cfg)
    assert events_files(run_dir) == []
    r = run_cli("drope-train", cfg, "--print-config", "--set", "train.tensorboard=maybe", check=False)
    expect_error(r, "off.yaml", "tensorboard")
    r = run_cli("drope-train", cfg, "--print-config", "--set", "train.tensorboard=true")
    assert "tensorboard: true" in r.stdout


def test_plot_writes_png_and_svg(tmp_path):
    run_dir = tmp_path / "run"
    cfg = tmp_path / "tb.yaml"
    cfg.write_text(CFG.format(out=run_dir, steps=4))
    train(cfg)
    r = run_cli("drope-train", "plot", run_dir)
    png, svg = run_dir / "curves.png", run_dir / "curves.svg"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text
    assert str(png) in r.stdout and str(svg) in r.stdout
    out = tmp_path / "figs" / "curves"
    run_cli("drope-train", "plot", run_dir, "--out", out, "--quiet")
    assert (tmp_path / "figs" / "curves.png").stat().st_size > 0
    assert (tmp_path / "figs" / "curves.svg").stat().st_size > 0
    # The training command line still works beside the subcommand.
    assert "tensorboard: true" in run_cli("drope-train", cfg, "--print-config").stdout


def test_plot_refuses_bad_run_dirs(tmp_path):
    def refused(args, *needles):
        expect_error(run_cli("drope-train", "plot", *args, check=False), *needles)

    refused([tmp_path / "absent"], "absent", "not a directory")
    f = tmp_path / "file"
    f.write_text("x")
    refused([f], "not a directory")
    empty = tmp_path / "empty"
    empty.mkdir()
    refused([empty], "log.jsonl", "missing")
    (empty / "log.jsonl").mkdir()
    refused([empty], "log.jsonl")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "log.jsonl").write_text('{"step": 1, "loss": 2.0, "lr": 0.1}\n{"step": 2, "loss": \n')
    refused([bad], "log.jsonl:2")
    (bad / "log.jsonl").write_text('{"step": 1, "loss": "high", "lr": 0.1}\n')
    refused([bad], "log.jsonl:1", "loss", "finite number")
    (bad / "log.jsonl").write_text('{"loss": 2.0}\n')
    refused([bad], "log.jsonl:1", "step")
    (bad / "log.jsonl").write_text('{"step": 3, "val_loss": 2.0}\n')
    refused([bad], "log.jsonl", "no training step")
    (bad / "log.jsonl").write_text("")
    refused([bad], "no training step")
    assert sorted(p.name for p in bad.iterdir()) == ["log.jsonl"]  # nothing written on refusal
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "log.jsonl")
    refused([fifo], "log.jsonl")
    # Training flags do not mix with plot; neither a missing RUN_DIR.
    ok = tmp_path / "ok"
    ok.mkdir()
    (ok / "log.jsonl").write_text('{"step": 1, "loss": 2.0, "lr": 0.1}\n')
    refused([ok, "--resume"], "plot takes RUN_DIR")
    expect_error(run_cli("drope-train", "plot", check=False), "run_dir")
    expect_error(run_cli("drope-train", check=False), "config")
