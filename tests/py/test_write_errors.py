"""Where our tools write, and what happens when writing fails. An output path that is a character device
(copies of /dev/null and /dev/full made with mknod) or a FIFO is written in place, never replaced by a rename;
/dev/full fails with ENOSPC naming the path; a FIFO without a reader is refused, not waited on. Run logs
(drope-train.log, log.jsonl) are never followed through a symlink, fresh or resumed. A full disk (a file-size
limit), a read-only directory (a read-only bind mount in a private mount namespace) or /dev/full while a
checkpoint, an export, a dataset, results or a log is written gives one clear line naming the path and the errno
text, and leaves the previous checkpoint loadable and no temporary behind."""
import json
import os
import resource
import shutil
import stat
import subprocess

import pytest
from safetensors.numpy import load_file

from conftest import BIN, expect_error, run_cli

TRAIN_CFG = """run: {{name: we, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 16, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: constant}}
train: {{steps: {steps}, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 2, keep_last: 3}}
"""


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    return e


def run(args, preexec_fn=None, stdout=None, wrap=()):
    kw = {"stdout": stdout} if stdout is not None else {"capture_output": True}
    if stdout is not None:
        kw["stderr"] = subprocess.PIPE
    return subprocess.run([*wrap, str(BIN / args[0]), *map(str, args[1:])], text=True, timeout=240, env=env1(),
                          preexec_fn=preexec_fn, **kw)


def clean_error(r, *needles):
    expect_error(r, *needles)
    assert r.returncode == 1, f"exit status {r.returncode} (a signal?)\n{r.stderr}"
    assert r.stderr.count("error:") == 1, r.stderr


def our_temps(d):
    return [n for n in os.listdir(d) if n.startswith(".drope-tmp-")]


def devices(tmp):
    """Copies of /dev/null and /dev/full (character devices 1:3 and 1:7) in tmp."""
    out = {}
    for name, minor in (("null", 3), ("full", 7)):
        try:
            os.mknod(tmp / name, 0o666 | stat.S_IFCHR, os.makedev(1, minor))
        except (PermissionError, OSError) as e:
            pytest.skip(f"cannot make device nodes here ({e})")
        out[name] = tmp / name
    return out


def is_chr(p):
    return stat.S_ISCHR(os.lstat(p).st_mode)


@pytest.fixture
def model(tmp):
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m")
    (tmp / "tokens.json").write_text(json.dumps([list(range(16))]))
    return tmp / "m"


def test_device_outputs_are_written_in_place_never_replaced(tmp, model):
    dev = devices(tmp)
    toks = tmp / "tokens.json"
    for name, tool in {"logits": ["drope-eval", "logits", "--model", model, "--tokens", toks, "--out"],
                       "dequantize": ["drope-model", "gguf", "--file", gguf_file(tmp), "--dequantize"],
                       "bench": ["drope-bench", "generate", "--model", model, "--context", 8, "--new-tokens", 2,
                                 "--repeats", 1, "--json"]}.items():
        r = run([*tool, dev["null"]])
        assert r.returncode == 0, (name, r.stderr)
        r = run([*tool, dev["full"]])
        clean_error(r, str(dev["full"]), "No space left on device")
        assert is_chr(dev["null"]) and is_chr(dev["full"]), name
        assert not our_temps(tmp), name
    assert sorted(os.listdir(tmp)) == sorted(["m", "tokens.json", "null", "full", "t.gguf"])


def gguf_file(tmp):
    path = tmp / "t.gguf"
    if not path.exists():
        gguf = pytest.importorskip("gguf")
        import numpy as np
        w = gguf.GGUFWriter(str(path), "llama")
        w.add_tensor("w", np.arange(64, dtype=np.float32).reshape(2, 32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return path


def test_fifo_and_stdout_outputs(tmp, model):
    toks = tmp / "tokens.json"
    ref = tmp / "ref.safetensors"
    # The reference with the same environment (one thread) as the runs it is compared with: a GEMM's float sums
    # depend on how many threads split them, so logits of 1 and 2 threads may differ in the last bit.
    r = run(["drope-eval", "logits", "--model", model, "--tokens", toks, "--out", ref])
    assert r.returncode == 0, r.stderr
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    # Nobody reads it: refused at once, not a hang.
    clean_error(run(["drope-eval", "logits", "--model", model, "--tokens", toks, "--out", fifo]), str(fifo),
                "no process reads")
    # With a reader the bytes arrive through the FIFO (the logits fit its buffer), which stays a FIFO.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    r = run(["drope-eval", "logits", "--model", model, "--tokens", toks, "--out", fifo])
    assert r.returncode == 0, r.stderr
    got = b""
    while chunk := os.read(fd, 1 << 20):
        got += chunk
    os.close(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and got == ref.read_bytes()
    # /proc/self/fd/1 (what /dev/stdout points to) redirected to a file: written in place, appended.
    out = tmp / "stdout.bin"
    with open(out, "w") as f:
        f.write("before\n")
        f.flush()
        r = run(["drope-eval", "logits", "--quiet", "--model", model, "--tokens", toks, "--out", "/proc/self/fd/1"],
                stdout=f)
    assert r.returncode == 0, r.stderr
    assert out.read_bytes() == b"before\n" + ref.read_bytes()


def train_cfg(tmp, name, steps=2):
    cfg = tmp / f"{name}.yaml"
    cfg.write_text(TRAIN_CFG.format(out=tmp / name, steps=steps))
    return cfg


def test_run_logs_are_never_followed_through_a_symlink(tmp):
    precious = tmp / "precious.txt"
    precious.write_text("the user's own file\n")
    # Fresh start into a directory whose drope-train.log is a symlink: refused, the file untouched.
    cfg = train_cfg(tmp, "fresh")
    (tmp / "fresh").mkdir()
    (tmp / "fresh" / "drope-train.log").symlink_to(precious)
    clean_error(run(["drope-train", cfg, "--force"]), str(tmp / "fresh" / "drope-train.log"), "symbolic link")
    assert precious.read_text() == "the user's own file\n"
    # Resume of a real run whose logs were swapped for symlinks: refused the same way.
    cfg = train_cfg(tmp, "run")
    assert run(["drope-train", cfg]).returncode == 0
    for name in ("drope-train.log", "log.jsonl"):
        log = tmp / "run" / name
        kept = log.read_bytes()
        log.unlink()
        log.symlink_to(precious)
        r = run(["drope-train", cfg, "--resume", "--set", "train.steps=4"])
        clean_error(r, str(log), "symbolic link")
        assert precious.read_text() == "the user's own file\n"
        log.unlink()
        log.write_bytes(kept)
    # A device in the log's place is refused too (a log is a regular file).
    devices(tmp)  # skips where device nodes cannot be made
    log = tmp / "run" / "log.jsonl"
    kept = log.read_bytes()
    log.unlink()
    os.mknod(log, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # a copy of /dev/full
    clean_error(run(["drope-train", cfg, "--resume", "--set", "train.steps=4"]), str(log))
    log.unlink()
    log.write_bytes(kept)
    assert run(["drope-train", cfg, "--resume", "--set", "train.steps=4"]).returncode == 0


def limit_file_size(nbytes):
    def f():
        resource.setrlimit(resource.RLIMIT_FSIZE, (nbytes, nbytes))
    return f


def test_a_full_disk_while_logging_is_one_clear_error(tmp):
    cfg = train_cfg(tmp, "run")
    assert run(["drope-train", cfg]).returncode == 0  # 2 steps, a checkpoint
    # Every file may grow to 3 KiB: config.yaml fits; drope-train.log, filled up to just below, fails at its next
    # line (one warning, the run goes on), then log.jsonl (a line per step) long before the final checkpoint.
    log = tmp / "run" / "drope-train.log"
    with open(log, "a") as f:
        f.write("#" * ((3 << 10) - 40 - log.stat().st_size) + "\n")
    r = run(["drope-train", cfg, "--resume", "--set", "train.steps=40", "--set", "train.checkpoint_every=0"],
            preexec_fn=limit_file_size(3 << 10))
    clean_error(r, str(tmp / "run" / "log.jsonl"), "write failed (File too large)")
    assert r.stderr.count(f"warning: {log}: write failed (File too large); the log file ends here") == 1, r.stderr
    assert "LOG ERROR" not in r.stderr
    assert sorted(os.listdir(tmp / "run" / "checkpoints")) == ["step-00000002"]
    load_file(str(tmp / "run" / "checkpoints" / "step-00000002" / "model.safetensors"))


def ro_mount(*dirs):
    """A command prefix running the tool in a private mount namespace where `dirs` are read-only bind mounts
    (the user namespace makes this work without privileges; root would ignore a chmod)."""
    binds = " && ".join(f"mount --bind {d} {d} && mount -o remount,bind,ro {d} {d}" for d in dirs)
    return ["unshare", "-rm", "sh", "-c", f'{binds} && exec "$@"', "sh"]


def can_mount_read_only(tmp):
    d = tmp / "probe"
    d.mkdir()
    r = subprocess.run([*ro_mount(d), "touch", str(d / "x")], capture_output=True, text=True)
    return r.returncode != 0 and "Read-only file system" in r.stderr


def test_a_read_only_directory_is_a_clear_error_and_the_checkpoint_stays(tmp, model):
    if shutil.which("unshare") is None or not can_mount_read_only(tmp):
        pytest.skip("no private mount namespace for a read-only bind mount (unshare -rm)")
    cfg = train_cfg(tmp, "run")
    assert run(["drope-train", cfg]).returncode == 0
    ckpts = tmp / "run" / "checkpoints"
    good = {p.name: p.read_bytes() for p in (ckpts / "step-00000002").iterdir()}
    # checkpoints/ read-only: training goes on, the save at step 4 fails naming the directory and the errno.
    r = run(["drope-train", cfg, "--resume", "--set", "train.steps=4"], wrap=ro_mount(ckpts))
    clean_error(r, "could not save the checkpoint", str(ckpts), "Read-only file system", "step-00000002 is intact")
    assert {p.name: p.read_bytes() for p in (ckpts / "step-00000002").iterdir()} == good
    assert sorted(os.listdir(ckpts)) == ["step-00000002"]
    assert run(["drope-train", cfg, "--resume", "--set", "train.steps=4"]).returncode == 0
    # An export, a dataset and results into a read-only directory: one line naming the path and the errno.
    ro = tmp / "ro"
    ro.mkdir()
    toks = tmp / "tokens.json"
    for args in (["drope-model", "convert", "--model", model, "--out", ro / "m"],
                 ["drope-data", "prepare", "-i", "/usr/share/common-licenses/GPL-3", "--paragraphs", "--out",
                  ro / "ds", "--train-tokenizer", "--vocab-size", 300],
                 ["drope-eval", "logits", "--model", model, "--tokens", toks, "--out", ro / "l.safetensors"]):
        clean_error(run(args, wrap=ro_mount(ro)), str(ro), "Read-only file system")
    assert os.listdir(ro) == []
    assert load_file(str(ckpts / "step-00000004" / "model.safetensors"))
