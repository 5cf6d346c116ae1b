"""drope-train end to end: data-parallel equivalence under torchrun (Gloo), kill -9 and resume, SIGTERM,
and bad input."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np

from conftest import BIN, expect_error, run_cli

CFG = """run: {{name: t, out_dir: {out}, seed: 5}}
model: {{preset: micro, max_position: 32}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}}
optim: {{lr: 3.0e-3}}
schedule: {{type: cosine, warmup: 2, steps: {steps}}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, checkpoint_every: {ckpt}, keep_last: 3}}
"""


def write_cfg(tmp, name, steps=8, ckpt=0):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=tmp / name, steps=steps, ckpt=ckpt))
    return p


def losses(run_dir):
    out = {}
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        j = json.loads(line)
        if "loss" in j:
            out[j["step"]] = j["loss"]
    return out


def final_weights(run_dir):
    from safetensors.numpy import load_file

    ckpts = sorted((run_dir / "checkpoints").glob("step-*"))
    return load_file(str(ckpts[-1] / "model.safetensors"))


def env1():
    e = dict(os.environ, OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(k, None)
    return e


def test_torchrun_two_ranks_match_one_process(tmp):
    single = write_cfg(tmp, "single")
    subprocess.run([str(BIN / "drope-train"), single, "--quiet"], check=True, env=env1(), timeout=240)
    multi = write_cfg(tmp, "multi")
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=2", "--master_port=29731",
                        str(BIN / "drope-train"), str(multi), "--quiet"],
                       env=env1(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = losses(tmp / "single"), losses(tmp / "multi")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for s in a:
        assert abs(a[s] - b[s]) < 1e-5, (s, a[s], b[s])
    wa, wb = final_weights(tmp / "single"), final_weights(tmp / "multi")
    assert wa.keys() == wb.keys()
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], atol=2e-5, rtol=0, err_msg=k)


def test_allreduce_overlaps_backward_and_matches_one_process(tmp):
    """Small buckets (several per step) and gradient accumulation: every bucket's all-reduce starts during
    the last micro-batch's backward, and the result still equals one process with the same global batch."""
    extra = "\n".join(["data: {text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8, micro_batch: 2}",
                        ""])
    cfgs = {}
    for name in ("single", "multi"):
        text = CFG.format(out=tmp / name, steps=4, ckpt=0)
        text = text.replace("data: {text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 8}", extra.strip())
        text = text.replace("keep_last: 3}", "keep_last: 3, allreduce_bucket_mb: 0.02}")
        cfgs[name] = tmp / f"{name}.yaml"
        cfgs[name].write_text(text)
    subprocess.run([str(BIN / "drope-train"), cfgs["single"], "--quiet"], check=True, env=env1(), timeout=240)
    torchrun = pathlib.Path(sys.executable).parent / "torchrun"
    r = subprocess.run([str(torchrun), "--no-python", "--nproc_per_node=2", "--master_port=29733",
                        str(BIN / "drope-train"), str(cfgs["multi"]), "--quiet"],
                       env=env1(), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    a, b = losses(tmp / "single"), losses(tmp / "multi")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for s in a:
        assert abs(a[s] - b[s]) < 1e-5, (s, a[s], b[s])
    steps = [json.loads(l) for l in (tmp / "multi" / "log.jsonl").read_text().splitlines() if '"loss"' in l]
    for j in steps:
        assert j["allreduce_buckets"] > 3, j
        assert j["allreduce_overlapped"] == j["allreduce_buckets"], j
    wa, wb = final_weights(tmp / "single"), final_weights(tmp / "multi")
    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], atol=2e-5, rtol=0, err_msg=k)


def test_sigkill_then_resume_gives_identical_losses(tmp):
    ref = write_cfg(tmp, "ref", steps=10, ckpt=2)
    subprocess.run([str(BIN / "drope-train"), ref, "--quiet"], check=True, env=env1(), timeout=240)
    cfg = write_cfg(tmp, "killed", steps=10, ckpt=2)
    run_dir = tmp / "killed"
    p = subprocess.Popen([str(BIN / "drope-train"), cfg, "--quiet"], env=env1())
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "checkpoints" / "step-00000004" / "state.json").exists():
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert (run_dir / "checkpoints").exists()
    subprocess.run([str(BIN / "drope-train"), cfg, "--quiet", "--resume"], check=True, env=env1(), timeout=240)
    assert losses(run_dir) == losses(tmp / "ref")  # bitwise: JSON floats printed round-trip exact
    wa, wb = final_weights(tmp / "ref"), final_weights(run_dir)
    for k in wa:
        assert np.array_equal(wa[k], wb[k]), k


def test_sigterm_saves_and_exits_zero(tmp):
    cfg = write_cfg(tmp, "term", steps=100000)
    p = subprocess.Popen([str(BIN / "drope-train"), cfg, "--quiet"], env=env1())
    deadline = time.time() + 60
    while time.time() < deadline and not (tmp / "term" / "log.jsonl").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=60) == 0
    ckpts = list((tmp / "term" / "checkpoints").glob("step-*/state.json"))
    assert len(ckpts) == 1


def test_bad_inputs(tmp):
    def fails(args, *needles):
        r = run_cli("drope-train", *args, check=False)
        assert r.returncode != 0
        for bad in ("terminate called", "Segmentation", "core dumped"):
            assert bad not in r.stderr
        for n in needles:
            assert str(n) in r.stderr, r.stderr

    cfg = write_cfg(tmp, "bad")
    fails([cfg, "--set", "train.stepz=3"], "bad.yaml", "train.stepz")
    fails([cfg, "--set", "data.text=/nonexistent/corpus"], "/nonexistent/corpus", "not found")
    fails([cfg, "--set", "data.batch_size=7", "--set", "data.micro_batch=2"], "batch_size 7", "micro_batch")
    fails([tmp / "missing.yaml"], "missing.yaml", "not found")
    fails([cfg, "--set", "run.phase=drope", "--set", "run.init=" + str(tmp / "nothing")], "nothing")
    # Resuming with a different model shape is refused with a clear message; the checkpoint stays.
    subprocess.run([str(BIN / "drope-train"), cfg, "--quiet", "--set", "train.steps=2"], check=True, env=env1(),
                   timeout=120)
    fails([cfg, "--resume", "--set", "model.intermediate_size=64"], "run.yaml", "resuming would change",
          "model.intermediate_size")
    assert (tmp / "bad" / "checkpoints" / "step-00000002" / "state.json").exists()


def test_launcher_variables_are_plain_integers(tmp):
    """RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and the other launcher integers are digits only, as launchers write
    them (' 0' and '+1' used to pass through strtol); LOCAL_WORLD_SIZE is checked at start even on one rank."""
    cfg = write_cfg(tmp, "env")
    cases = (({"RANK": " 0", "WORLD_SIZE": "1"}, "RANK"), ({"RANK": "0", "WORLD_SIZE": "+1"}, "WORLD_SIZE"),
             ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0x0"}, "LOCAL_RANK"),
             ({"LOCAL_WORLD_SIZE": "abc"}, "LOCAL_WORLD_SIZE"), ({"LOCAL_WORLD_SIZE": "0"}, "LOCAL_WORLD_SIZE"),
             ({"MASTER_PORT": "29500 "}, "MASTER_PORT"))
    for extra, name in cases:
        r = subprocess.run([str(BIN / "drope-train"), cfg, "--set", "train.steps=1"], capture_output=True, text=True,
                           env=dict(env1(), **extra), timeout=120)
        expect_error(r, f"environment variable {name}=", "expected an integer in [")
        assert not (tmp / "env").exists(), extra


def test_train_on_prepared_token_shards(tmp):
    """drope-data prepare (SentencePiece trained on real prose) → drope-train on the shards."""
    r = subprocess.run([str(BIN / "drope-data"), "prepare", "--input", "/usr/share/common-licenses", "--paragraphs",
                        "--out", str(tmp / "ds"), "--train-tokenizer", "--vocab-size", "600", "--val-fraction", "0.1",
                        "--shard-tokens", "20000"], capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr
    index = json.loads((tmp / "ds" / "index.json").read_text())
    assert len(index["splits"]["train"]["shards"]) > 1
    cfg = tmp / "ds.yaml"
    cfg.write_text(CFG.format(out=tmp / "dsrun", steps=30, ckpt=0)
                   .replace("data: {text: /usr/share/common-licenses/GPL-3,", f"data: {{dataset: {tmp / 'ds'},")
                   .replace("model: {preset: micro,", "model: {preset: micro, vocab_size: 600,"))
    subprocess.run([str(BIN / "drope-train"), cfg, "--quiet"], check=True, env=env1(), timeout=240)
    l = losses(tmp / "dsrun")
    assert l[30] < l[1] - 0.7, (l[1], l[30])
    # A model whose vocabulary is smaller than the dataset's is refused with a clear message.
    bad = tmp / "bad.yaml"
    bad.write_text(cfg.read_text().replace("vocab_size: 600", "vocab_size: 100"))
    r = run_cli("drope-train", bad, check=False)
    assert r.returncode != 0 and "vocabulary 600" in r.stderr, r.stderr


def test_chunked_loss_matches_full_logits(tmp):
    """train.chunked_loss (the default: LM head + cross-entropy in row chunks, ops::linear_cross_entropy)
    trains the same model as the full-logits loss: same losses and final weights within float32 rounding."""
    runs = {}
    for name, chunked in (("chunked", "true"), ("full", "false")):
        p = write_cfg(tmp, name, steps=6)
        p.write_text(p.read_text().replace("keep_last: 3}", f"keep_last: 3, chunked_loss: {chunked}}}"))
        subprocess.run([str(BIN / "drope-train"), p, "--quiet"], check=True, env=env1(), timeout=240)
        runs[name] = tmp / name
        assert f"chunked_loss: {chunked}" in (tmp / name / "config.yaml").read_text()
    a, b = losses(runs["chunked"]), losses(runs["full"])
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for s in a:
        assert abs(a[s] - b[s]) < 1e-5, (s, a[s], b[s])
    wa, wb = final_weights(runs["chunked"]), final_weights(runs["full"])
    for k in wa:
        np.testing.assert_allclose(wa[k], wb[k], atol=2e-5, rtol=0, err_msg=k)
