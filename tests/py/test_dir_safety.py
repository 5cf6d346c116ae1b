"""Directories our tools write, at the CLI level: a run directory that another drope-train is training in is
refused (also with --resume), a lock left by a killed run is taken over and named; an output is never its
input, inside it or around it (however spelled); drope-train does not write into a user's directory without
--force; a log.jsonl that is a FIFO is refused on resume instead of blocking it."""
import fcntl
import hashlib
import os
import signal
import subprocess
import time

from conftest import BIN, expect_error, run_cli

CFG = """run: {{name: ds, out_dir: {out}, seed: 3}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}}
optim: {{lr: 3.0e-3}}
schedule: {{type: constant}}
train: {{steps: {steps}, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: {ckpt}, keep_last: 2}}
"""


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    return e


def train(cfg, *args, timeout=240):
    return subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env1())


def clean_error(r, *needles):
    expect_error(r, *needles)
    assert r.returncode == 1, f"exit status {r.returncode} (a signal?)\n{r.stderr}"
    assert r.stderr.count("error:") == 1, r.stderr


def write_cfg(tmp, out, steps, name="run.yaml", ckpt=2):
    p = tmp / name
    p.write_text(CFG.format(out=out, steps=steps, ckpt=ckpt))
    return p


def start_long_run(cfg, *args):
    """A drope-train that runs until stopped; returns once it has logged a step."""
    p = subprocess.Popen([str(BIN / "drope-train"), str(cfg), "--quiet", *args], env=env1(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    log = cfg.parent / "run" / "log.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (log.exists() and log.read_text().strip()):
        assert p.poll() is None, p.stderr.read()
        time.sleep(0.05)
    assert log.read_text().strip(), "the run logged nothing"
    return p


def tree_digest(d):
    h = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(d)):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(root, f)
            h.update(p.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def test_a_live_run_directory_is_refused_to_a_second_process(tmp):
    cfg = write_cfg(tmp, tmp / "run", steps=100000, ckpt=0)
    p = start_long_run(cfg)
    try:
        for args in ([], ["--resume"]):
            r = train(cfg, *args)
            clean_error(r, f"{tmp / 'run'} is in use by process {p.pid}", "drope-train")
        assert p.poll() is None, "the first run was disturbed"
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=120) == 0, p.stderr.read()
    assert (tmp / "run" / ".drope-lock").read_text() == ""  # released at exit: nothing to take over


def test_a_lock_left_by_a_killed_run_is_taken_over_and_named(tmp):
    cfg = write_cfg(tmp, tmp / "run", steps=100000, ckpt=0)
    p = start_long_run(cfg)
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=60)
    assert (tmp / "run" / ".drope-lock").read_text().strip() == str(p.pid)
    short = write_cfg(tmp, tmp / "run", steps=2, name="short.yaml")
    r = train(short)  # the lock file marks the directory as a run directory of ours
    assert r.returncode == 0, r.stderr
    assert f"taking over the lock of process {p.pid}" in r.stderr, r.stderr
    assert (tmp / "run" / ".drope-lock").read_text() == ""


def test_a_model_output_is_never_its_input(tmp):
    m = tmp / "models" / "m"
    run_cli("drope-model", "init", "--preset", "micro", "--out", m)
    os.symlink(m, tmp / "link")
    before = tree_digest(tmp / "models")
    for cmd in ("convert", "drop"):
        for out, needle in ((m, "is the input --model"), (tmp / "link", "is the input --model"),
                            (f"{tmp}/models/./m/", "is the input --model"), (m / "sub", "is inside the input"),
                            (tmp / "models", "contains the input")):
            for force in ([], ["--force"]):
                r = run_cli("drope-model", cmd, "--model", m, "--out", out, *force, check=False)
                clean_error(r, "--out", str(out), needle, str(m))
    assert tree_digest(tmp / "models") == before
    assert sorted(os.listdir(tmp / "models")) == ["m"]
    run_cli("drope-model", "drop", "--model", tmp / "link", "--out", tmp / "models" / "m-nope")  # a sibling is fine


def test_a_dataset_output_is_never_its_input(tmp):
    src = tmp / "corpus"
    src.mkdir()
    (src / "a.txt").write_text("hello world\n\nanother paragraph\n" * 50)
    before = tree_digest(src)
    for out, needle in ((src, "is the input"), (src / "ds", "is inside the input"), (tmp, "contains the input")):
        r = run_cli("drope-data", "prepare", "-i", src, "--paragraphs", "--train-tokenizer", "--vocab-size", 400,
                    "--out", out, check=False)
        clean_error(r, "--out", str(out), needle)
    assert tree_digest(src) == before


def test_train_does_not_write_into_a_users_directory_without_force(tmp):
    user = tmp / "mine"
    user.mkdir()
    (user / "log.jsonl").write_text("my own notes\n")
    cfg = write_cfg(tmp, user, steps=2, name="elsewhere.yaml")
    before = tree_digest(user)
    for args in ([], ["--resume"]):
        r = train(cfg, *args)
        clean_error(r, "run.out_dir", str(user), "not a run directory", "--force")
    assert tree_digest(user) == before and sorted(os.listdir(user)) == ["log.jsonl"]
    # The config the run starts from, kept as config.yaml in the directory it names: the run records its resolved
    # config there, so it is refused, --force or not, with that reason first (not a --force hint).
    cfg = write_cfg(user, user, steps=2, name="config.yaml")
    before = tree_digest(user)
    for args in ([], ["--resume"], ["--force"]):
        r = train(cfg, *args)
        clean_error(r, str(cfg), "records its resolved config in this file", "--force or not")
        assert "pass --force" not in r.stderr
    assert tree_digest(user) == before
    # A run directory named by its data is refused even with --force.
    text = tmp / "texts"
    text.mkdir()
    (text / "a.txt").write_text("some text to train on\n" * 200)
    cfg2 = tmp / "t.yaml"
    cfg2.write_text(CFG.format(out=text, steps=2, ckpt=2).replace("/usr/share/common-licenses/GPL-3", str(text)))
    clean_error(train(cfg2, "--force"), "run.out_dir", "is the input data.text")
    # With --force and the config outside, the user's directory is used (its files with our names are replaced:
    # that is what --force is for); a second start knows it as a run directory, and resumes from the config.yaml
    # the run wrote there.
    outside = write_cfg(tmp, user, steps=2, name="outside.yaml")
    r = train(outside, "--force")
    assert r.returncode == 0, r.stderr
    assert (user / ".drope-lock").exists() and (user / "checkpoints").is_dir()
    r = train(cfg, "--resume")
    assert r.returncode == 0, r.stderr


def test_a_fifo_log_is_refused_on_resume(tmp):
    cfg = write_cfg(tmp, tmp / "run", steps=2)
    r = train(cfg)
    assert r.returncode == 0, r.stderr
    log = tmp / "run" / "log.jsonl"
    log.unlink()
    os.mkfifo(log)
    r = train(cfg, "--resume", "--set", "train.steps=4", timeout=60)
    clean_error(r, str(log), "FIFO")


def test_outputs_written_whole_are_locked_beside_them(tmp):
    """drope-model, drope-data and drope-eval lock '.<name>.drope-lock' next to their output while they write
    it; here this test process holds that lock, as a second tool would."""
    (tmp / "v300.yaml").write_text("model: {preset: micro, vocab_size: 300}\n")
    run_cli("drope-model", "init", "--config", tmp / "v300.yaml", "--out", tmp / "m0")
    text = tmp / "t.txt"
    text.write_text("The quick brown fox jumps over the lazy dog.\n\n" * 40)
    cases = [
        (tmp / "m", ("drope-model", "init", "--preset", "micro", "--out", tmp / "m")),
        (tmp / "m2", ("drope-model", "drop", "--model", tmp / "m0", "--out", tmp / "m2")),
        (tmp / "ds", ("drope-data", "prepare", "-i", text, "--paragraphs", "--train-tokenizer", "--vocab-size", 300,
                      "--out", tmp / "ds")),
        (tmp / "res" / "ppl", ("drope-eval", "ppl", "--model", tmp / "m0", "--tokenizer", tmp / "ds", "--data", text,
                               "--lengths", 16, "--out", tmp / "res" / "ppl")),  # the tokenizer of the case before
    ]
    for out, cmd in cases:
        out.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(out.parent / f".{out.name}.drope-lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{os.getpid()}\n".encode())
            clean_error(run_cli(*cmd, check=False), f"{out} is in use by process {os.getpid()}")
            assert not out.exists() and not list(out.parent.glob(f"{out.name}.*")), os.listdir(out.parent)
        finally:
            os.close(fd)
        # Released (this process's lock file now names a live process, but holds no lock): the tool runs.
        r = run_cli(*cmd, check=False)
        assert r.returncode == 0, r.stderr
        assert not (out.parent / f".{out.name}.drope-lock").exists()


RESULTS = '{"schema": "drope.results", "schema_version": 1, "kind": "ppl", "summary": {"ppl@16": %s}}\n'


def test_eval_and_analyze_outputs_are_never_their_inputs(tmp):
    """An output file, prefix or directory that is an input, or lies inside an input directory, is refused
    naming --out and the input's flag, before anything is written."""
    m = tmp / "models" / "m"
    run_cli("drope-model", "init", "--preset", "micro", "--out", m)
    os.symlink(m, tmp / "link")
    tokens = tmp / "in" / "tokens.json"
    tokens.parent.mkdir()
    tokens.write_text("[[1, 2, 3]]")
    text = tmp / "in" / "prompt.txt"
    text.write_text("The grass is green. The sky is blue. " * 4)
    (tmp / "in" / "a.json").write_text(RESULTS % 3.0)
    (tmp / "in" / "b.json").write_text(RESULTS % 4.0)
    before = {d: tree_digest(tmp / d) for d in ("models", "in")}
    att = ("drope-analyze", "attention", "--model", m, "--text", text, "--layer", 0, "--head", 0)
    cases = [
        ((*att, "--out", m), "is the input --model"),
        ((*att, "--out", tmp / "link"), "is the input --model"),
        ((*att, "--out", m / "maps"), "is inside the input --model"),
        ((*att, "--out", text), "is the input --text"),
        (("drope-analyze", "constant-seq", "--model", m, "--out", f"{tmp}/models/./m/cs"),
         "is inside the input --model"),
        (("drope-analyze", "bias-grad", "--model", m, "--seqs", 1, "--seeds", 1, "--seq-len", 8, "--out",
          tmp / "link" / "bg"), "is inside the input --model"),
        (("drope-analyze", "needle-attention", "--model", m, "--haystack", text, "--out", m / "na"),
         "is inside the input --model"),
        (("drope-eval", "logits", "--model", m, "--tokens", tokens, "--out", m / "model.safetensors"),
         "is inside the input --model"),
        (("drope-eval", "logits", "--model", m, "--tokens", tokens, "--out", tokens), "is the input --tokens"),
        (("drope-eval", "compare", tmp / "in" / "a.json", tmp / "in" / "b.json", "--out", tmp / "in" / "a"),
         "is the input FILES"),
        (("drope-eval", "ppl", "--model", m, "--data", text, "--lengths", 8, "--out", m / "ppl"),
         "is inside the input --model"),
        (("drope-eval", "ppl", "--model", m, "--data", text, "--lengths", 8, "--with", tmp / "in" / "a.json",
          "--out", tmp / "in" / "a"), "is the input --with"),
        (("drope-eval", "offset-key", "--model", m, "--lengths", 32, "--queries", 4, "--out", tmp / "link" / "ok"),
         "is inside the input --model"),
    ]
    for cmd, needle in cases:
        r = run_cli(*cmd, check=False)
        clean_error(r, "--out", needle)
        assert str(cmd[-1]) in r.stderr, r.stderr
        for d, digest in before.items():
            assert tree_digest(tmp / d) == digest, (cmd, os.listdir(tmp / d))
    assert sorted(os.listdir(tmp / "models")) == ["m"]
    assert sorted(os.listdir(m)) == sorted(["config.json", "drope.yaml", "model.safetensors"]), os.listdir(m)
    assert sorted(os.listdir(tmp / "in")) == ["a.json", "b.json", "prompt.txt", "tokens.json"]
    # Outputs beside the inputs are fine, and so is an output directory that holds an input.
    run_cli(*att, "--out", tmp / "in")
    run_cli("drope-eval", "compare", tmp / "in" / "a.json", tmp / "in" / "b.json", "--out", tmp / "in" / "ab")
    run_cli("drope-eval", "logits", "--model", tmp / "link", "--tokens", tokens, "--out", tmp / "logits.safetensors")
    assert (tmp / "in" / "attention_L0_H0.png").exists() and (tmp / "in" / "ab.md").exists()


def test_analyze_never_writes_over_an_input_kept_in_its_out_directory(tmp):
    """An input may lie in drope-analyze's --out directory, but not under a name the command writes there
    (head_scores.json, attention_L0_H0.json, bias_grad.json, ...): that is refused before the run."""
    m = tmp / "m"
    run_cli("drope-model", "init", "--preset", "micro", "--out", m)
    out = tmp / "out"
    out.mkdir()
    for name in ("head_scores.json", "attention_L0_H0.json", "tokens.json"):
        (out / name).write_text("[[1, 2, 3, 4, 5, 6, 7, 8]]")
    (out / "attention_L1_H0.svg").write_text("The grass is green. The sky is blue. " * 4)
    (out / "bias_grad.json").write_text("The grass is green. The sky is blue. " * 40)
    before = tree_digest(out)
    cases = [
        (("drope-analyze", "head-scores", "--model", m, "--tokens", out / "head_scores.json", "--out", out),
         "writes head_scores.json there, which is the input --tokens"),
        (("drope-analyze", "attention", "--model", m, "--tokens", out / "attention_L0_H0.json", "--layer", 0,
          "--head", 0, "--out", out), "which is the input --tokens"),
        (("drope-analyze", "attention", "--model", m, "--text", out / "attention_L1_H0.svg", "--layer", 1,
          "--head", 0, "--out", out), "writes attention_L1_H0.svg there, which is the input --text"),
        (("drope-analyze", "bias-grad", "--preset", "micro", "--seqs", 1, "--seeds", 1, "--seq-len", 16, "--text",
          out / "bias_grad.json", "--out", out), "which is the input --text"),
    ]
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    os.symlink(out / "head_scores.json", elsewhere / "link.json")  # named through a link, still that file
    cases.append((("drope-analyze", "head-scores", "--model", m, "--tokens", elsewhere / "link.json", "--out", out),
                  "writes head_scores.json there, which is the input --tokens"))
    for cmd, needle in cases:
        clean_error(run_cli(*cmd, check=False), "--out", needle)
        assert tree_digest(out) == before, cmd
    # Under another name the input stays, and the output is written beside it.
    run_cli("drope-analyze", "attention", "--model", m, "--tokens", out / "tokens.json", "--layer", 0, "--head", 1,
            "--out", out)
    assert (out / "tokens.json").read_text() == "[[1, 2, 3, 4, 5, 6, 7, 8]]" and (out / "attention_L0_H1.json").exists()


def test_analyze_and_eval_outputs_are_locked(tmp):
    """drope-analyze holds '.drope-lock' inside its output directory, drope-eval logits / compare /
    longbench-score '.<name>.drope-lock' beside their output, while they write; here this test process holds
    that lock, as a second tool would, and the tool refuses without writing anything."""
    m = tmp / "m"
    run_cli("drope-model", "init", "--preset", "micro", "--out", m)
    tokens = tmp / "tokens.json"
    tokens.write_text("[[1, 2, 3]]")
    (tmp / "a.json").write_text(RESULTS % 3.0)
    pred = tmp / "pred"
    pred.mkdir()
    (pred / "hotpotqa.jsonl").write_text('{"pred": "Ann", "answers": ["Ann"], "all_classes": null, "length": 9}\n')
    beside = [
        (tmp / "l.safetensors", ("drope-eval", "logits", "--model", m, "--tokens", tokens, "--out",
                                 tmp / "l.safetensors")),
        (tmp / "cmp", ("drope-eval", "compare", tmp / "a.json", "--out", tmp / "cmp")),
        (pred / "result", ("drope-eval", "longbench-score", "--pred", pred)),
    ]
    inside = [(tmp / "cs", ("drope-analyze", "constant-seq", "--model", m, "--out", tmp / "cs"))]
    for out, cmd in beside + inside:
        lock = out / ".drope-lock" if (out, cmd) in inside else out.parent / f".{out.name}.drope-lock"
        lock.parent.mkdir(exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{os.getpid()}\n".encode())
            clean_error(run_cli(*cmd, check=False), f"{out} is in use by process {os.getpid()}")
            assert not list(out.parent.glob(f"{out.name}.*")), os.listdir(out.parent)
        finally:
            os.close(fd)
        r = run_cli(*cmd, check=False)
        assert r.returncode == 0, r.stderr
    assert (tmp / "cs" / "constant_seq.json").exists() and (pred / "result.json").exists()
    assert not (tmp / ".l.safetensors.drope-lock").exists() and not (pred / ".result.drope-lock").exists()
