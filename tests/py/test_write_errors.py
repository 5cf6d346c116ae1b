"""Outputs that are not files of ours: an output path that is a character device (copies of /dev/null and
/dev/full made with mknod) or a FIFO is written in place, never replaced by a rename; /dev/full fails with ENOSPC
naming the path; a FIFO without a reader is refused, not waited on; /proc/self/fd/1 is written in place."""
import json
import os
import stat
import subprocess

import pytest

from conftest import BIN, expect_error, run_cli


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
    run_cli("drope-eval", "logits", "--model", model, "--tokens", toks, "--out", ref)
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
