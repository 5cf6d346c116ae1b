"""Logging flags on every tool (--log-level, --quiet, --log-ranks), progress through a pipe, the run file of
drope-train, and which ranks speak under a 2-rank torchrun."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from conftest import BIN, expect_error, free_port, micro_train_yaml, run_cli

TRAIN = str(BIN / "drope-train")
STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[(info|warning|error)\] ")
# One command per tool that reaches the logger (each fails later for want of real input, or not at all).
COMMANDS = [
    ["drope-train"],
    ["drope-model", "info", "--preset", "micro"],
    ["drope-data", "encode", "--tokenizer", "missing.json", "--text", "missing.txt"],
    ["drope-analyze", "rope-scaling", "--type", "yarn", "--head-dim", "64", "--train-length", "2048"],
    ["drope-bench", "attention"],
    ["drope-eval", "logits", "--model", "missing", "--tokens", "missing.json", "--out", "x.safetensors"],
]


def env1(**extra):
    e = dict(os.environ, OMP_NUM_THREADS="1", **extra)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"):
        e.pop(k, None)
    return e


def write_cfg(tmp, name):
    p = tmp / f"{name}.yaml"
    p.write_text(micro_train_yaml(tmp / name, 2))
    return p


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_bad_logging_flags_are_refused_naming_the_flag(cmd, tmp):
    for flags, needles in ((["--log-level", "loud"], ["--log-level", "'loud'", "trace, debug, info, warn, error, off"]),
                           (["--log-ranks", "3"], ["--log-ranks", "'3'", "all"]),
                           (["--quiet", "--log-level", "debug"], ["--quiet", "--log-level"])):
        r = subprocess.run([str(BIN / cmd[0]), *cmd[1:], *flags], capture_output=True, text=True, cwd=tmp,
                           env=env1(), timeout=120)
        expect_error(r, *needles)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert r.stdout == ""


def test_levels_and_quiet_filter_messages_not_results(tmp):
    # drope-model init: the model summary is the command's output; "saved ..." is a message.
    def init(*flags, before=()):
        return run_cli("drope-model", *before, "init", "--preset", "micro", "--out", tmp / "m", "--force", *flags)

    r = init()
    assert "parameters:" in r.stdout and "saved " in r.stdout and r.stderr == ""
    for quiet in (init("--quiet"), init("--log-level", "warn"), init(before=["--quiet"]), init("--log-level", "off")):
        assert "parameters:" in quiet.stdout and "saved " not in quiet.stdout and quiet.stderr == ""
    assert "saved " in init("--log-level", "debug").stdout
    # drope-analyze keeps stdout for JSON: its messages go to stderr, and --quiet leaves the JSON alone.
    args = ["drope-analyze", "rope-scaling", "--type", "yarn", "--head-dim", 64, "--train-length", 2048,
            "--out", tmp / "rs"]
    r = run_cli(*args)
    assert r.stdout.lstrip().startswith("[") and "wrote " in r.stderr
    q = run_cli(*args, "--quiet")
    assert q.stdout == r.stdout and q.stderr == ""


def test_warnings_survive_quiet_and_errors_go_to_stderr(tmp):
    cfg = write_cfg(tmp, "nan")
    r = subprocess.run([TRAIN, str(cfg), "--quiet"], capture_output=True, text=True,
                       env=env1(DROPE_TEST_FAULTS="1", DROPE_FAULT_NAN_AT_STEP="2"), timeout=240)
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert r.stderr.startswith("warning: step 2: non-finite loss/gradient norm"), r.stderr
    r = subprocess.run([TRAIN, str(write_cfg(tmp, "nan2")), "--log-level", "error"], capture_output=True, text=True,
                       env=env1(DROPE_TEST_FAULTS="1", DROPE_FAULT_NAN_AT_STEP="2"), timeout=240)
    assert r.returncode == 0 and r.stdout == "" and r.stderr == "", r.stderr


def test_train_writes_a_run_file_with_timestamps(tmp):
    cfg = write_cfg(tmp, "run")
    r = subprocess.run([TRAIN, str(cfg)], capture_output=True, text=True, env=env1(), timeout=240)
    assert r.returncode == 0, r.stderr
    console = r.stdout.splitlines()
    assert console[0].startswith("t: phase pretrain") and console[-1].startswith("done: step 2")
    assert not any(STAMP.match(l) for l in console)  # the terminal keeps its look
    lines = (tmp / "run" / "drope-train.log").read_text().splitlines()
    assert lines and all(STAMP.match(l) for l in lines), lines
    assert [STAMP.sub("", l) for l in lines] == console
    # --quiet quiets the console, not the record of the run; a resume appends.
    r = subprocess.run([TRAIN, str(cfg), "--quiet", "--resume", "--set", "train.steps=3", "--set", "schedule.steps=3"],
                       capture_output=True, text=True, env=env1(), timeout=240)
    assert r.returncode == 0 and r.stdout == "", r.stderr
    more = (tmp / "run" / "drope-train.log").read_text().splitlines()
    assert more[:len(lines)] == lines and any("done: step 3" in l for l in more[len(lines):]), more


def test_progress_through_a_pipe_is_one_line_per_step(tmp):
    tokenizers = pytest.importorskip("tokenizers")
    licenses = pathlib.Path("/usr/share/common-licenses")
    if not licenses.is_dir():
        pytest.skip("needs /usr/share/common-licenses")
    hf = tokenizers.Tokenizer(tokenizers.models.BPE())
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"], show_progress=False,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    hf.train_from_iterator((licenses / "GPL-3").read_text().split("\n\n"), trainer=trainer)
    model = tmp / "m"
    run_cli("drope-model", "init", "--preset", "tiny", "--out", model)
    (model / "tokenizer.json").write_text(hf.to_str(), encoding="utf-8")
    r = run_cli("drope-eval", "niah", "--model", model, "--tasks", "single_1", "--lengths", 300, "--trials", 3,
                "--batch-size", 1, "--max-new-tokens", 2, "--out", tmp / "res" / "niah")
    assert "\r" not in r.stdout
    progress = [l for l in r.stdout.splitlines() if l.startswith("  niah_single_1 @ 300: ")]
    assert progress == [f"  niah_single_1 @ 300: {i}/3" for i in (1, 2, 3)], r.stdout
    q = run_cli("drope-eval", "niah", "--model", model, "--tasks", "single_1", "--lengths", 300, "--trials", 3,
                "--batch-size", 1, "--max-new-tokens", 2, "--out", tmp / "res" / "niah2", "--quiet")
    assert "niah_single_1 @ 300:" not in q.stdout and "| single_1 |" in q.stdout  # the table is output


def torchrun_train(tmp, name, *flags):
    cfg = write_cfg(tmp, name)
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=2", f"--master_port={free_port()}",
                        TRAIN, str(cfg), *flags], capture_output=True, text=True, env=env1(), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def test_two_ranks_rank_zero_logs_unless_all(tmp):
    r = torchrun_train(tmp, "main")
    lines = r.stdout.splitlines()
    assert sum(l.startswith("done: step 2") for l in lines) == 1, r.stdout
    assert sum(l.startswith("t: phase pretrain") for l in lines) == 1, r.stdout
    assert "[rank " not in r.stdout and "[rank 1]" not in r.stderr
    r = torchrun_train(tmp, "all", "--log-ranks", "all")
    lines = r.stdout.splitlines()
    for rank in (0, 1):
        assert any(l.startswith(f"[rank {rank}] done: step 2") for l in lines), r.stdout
        assert any(l.startswith(f"[rank {rank}] t: phase pretrain") for l in lines), r.stdout
    assert not [l for l in lines if l.startswith(("done:", "t: phase", "step "))], r.stdout
    recorded = [STAMP.sub("", l) for l in (tmp / "all" / "drope-train.log").read_text().splitlines()]
    assert recorded and all(l.startswith("[rank 0] ") for l in recorded), recorded  # rank 0 keeps the run file
