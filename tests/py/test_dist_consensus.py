"""Ranks that disagree (Gloo, 2 CPU ranks launched by hand, as srun would): before the first step every rank's
resolved config, world size, start, dataset and binary are compared through the rendezvous store; a difference
ends every rank with one line naming the key and both values, and a rank that never arrives ends the other within
train.dist_timeout_s naming it. Never a C++ abort, never divergent replicas that both exit 0."""
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import BIN, free_port, run_cli

CFG = """run: {{name: c, out_dir: {out}, seed: {seed}}}
model: {{preset: micro, max_position: 32, hidden_size: {hidden}}}
data: {{text: {text}, seq_len: {seq}, batch_size: 8}}
optim: {{lr: {lr}}}
schedule: {{type: cosine, warmup: 2}}
train: {{steps: {steps}, log_every: 1, eval_batches: 2, dist_timeout_s: {timeout}, shard: {shard},
         checkpoint_every: {ckpt}}}
"""
BASE = {"seed": 5, "hidden": 64, "seq": 32, "lr": "3.0e-3", "steps": 4, "timeout": 20, "shard": "none", "ckpt": 0,
        "text": "/usr/share/common-licenses/GPL-3"}
DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
             "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE")
TRAIN = str(BIN / "drope-train")
BAD = "terminate called", "EnforceNotMet", "Traceback", "Aborted", "Segmentation"


def cfg_file(tmp, name, out=None, **over):
    p = tmp / f"{name}.yaml"
    p.write_text(CFG.format(out=out or tmp / "run", **{**BASE, **over}))
    return p


def env_for(rank, world, port):
    e = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    e.update(OMP_NUM_THREADS="1", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    return e


def launch(cfgs, worlds=None, extra=None, cwds=None, envs=None):
    """Starts one rank per config; `cwds` (one working directory per rank) stands for each rank's node, where a
    relative run.out_dir names a different directory."""
    port = free_port()
    worlds = worlds or [len(cfgs)] * len(cfgs)
    procs = []
    for r, (cfg, w) in enumerate(zip(cfgs, worlds)):
        args = [TRAIN, str(cfg), "--quiet", *((extra or {}).get(r, []))]
        procs.append(subprocess.Popen(args, env={**env_for(r, w, port), **(envs or {}).get(r, {})},
                                      cwd=(cwds or {}).get(r), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    for p in procs:
        try:
            _, e = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            _, e = p.communicate()
            raise AssertionError(f"rank hung:\n{e}") from None
        out.append((p.returncode, e))
    return out


@pytest.mark.parametrize("key,over,value0,value1", [
    ("run.seed", {"seed": 6}, "5", "6"),
    ("optim.lr", {"lr": "1.0e-3"}, "0.0030000000000000001", "0.001"),  # as the resolved config writes it
    ("data.seq_len", {"seq": 16}, "32", "16"),
    ("schedule.steps", {"steps": 6}, "4", "6"),  # schedule.steps follows train.steps and comes first
    ("model.hidden_size", {"hidden": 32}, "64", "32"),
    ("train.shard", {"shard": "optimizer"}, "none", "optimizer"),
])
def test_a_differing_setting_is_refused_on_every_rank(tmp, key, over, value0, value1):
    t0 = time.monotonic()
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "b", **over)])
    assert time.monotonic() - t0 < 60
    for rc, err in res:
        assert rc != 0, err
        assert not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "ranks disagree before the first step" in err and key in err, err
        assert f"'{value0}' on rank 0" in err and f"'{value1}' on rank 1" in err, err
    assert not (tmp / "run" / "checkpoints").exists()


def test_a_differing_start_is_refused(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")], extra={1: ["--resume"]})
    for rc, err in res:
        assert rc != 0 and "--resume" in err and "'not given' on rank 0" in err, err


def test_a_differing_world_size_is_refused(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")], worlds=[2, 3])
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD), err
    assert "world size is '2' on rank 0 but '3' on rank 1" in res[0][1], res[0][1]


def test_a_rank_that_never_arrives_is_named(tmp):
    """Rank 1 is never started: rank 0 ends within train.dist_timeout_s naming it."""
    port = free_port()
    t0 = time.monotonic()
    p = subprocess.run([TRAIN, str(cfg_file(tmp, "a", timeout=3)), "--quiet"], env=env_for(0, 2, port),
                       capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert p.returncode != 0 and "rank 1 did not arrive within train.dist_timeout_s = 3 s" in p.stderr, p.stderr
    assert took < 30, took


def test_a_rank_started_twice_is_refused_and_the_run_goes_on(tmp):
    """A second process given RANK=1 while the run trains: it stops at once naming the duplicate (not 'another rank
    died' at its first collective, nor in the first one's place); rank 0 and the first rank 1 train on."""
    port, cfg = free_port(), cfg_file(tmp, "a", steps=100000)
    procs = [subprocess.Popen([TRAIN, str(cfg), "--quiet"], env=env_for(r, 2, port), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    log = tmp / "run" / "log.jsonl"

    def steps():
        return log.read_text().count('"loss"') if log.exists() else 0

    try:
        deadline = time.monotonic() + 90
        while steps() == 0:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.01)
        dup = subprocess.run([TRAIN, str(cfg), "--quiet"], env=env_for(1, 2, port), capture_output=True, text=True,
                             timeout=90)
        assert dup.returncode != 0 and not any(b in dup.stderr for b in BAD), dup.stderr
        assert len(dup.stderr.strip().splitlines()) == 1, dup.stderr
        assert "rank 1 of 2: another process already joined this run as rank 1" in dup.stderr, dup.stderr
        seen = steps()
        while steps() < seen + 3:  # the run goes on
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.01)
    finally:
        for p in procs:
            p.kill()
            p.communicate()


def test_a_rank_that_cannot_start_stops_the_others_at_once(tmp):
    """Rank 1's config is missing on its node: it posts its error where rank 0 compares the ranks, and rank 0 stops
    naming rank 1 and that error, not after train.dist_timeout_s (60 s here) with 'rank 1 did not arrive'."""
    t0 = time.monotonic()
    res = launch([cfg_file(tmp, "a", timeout=60), tmp / "missing.yaml"])
    assert time.monotonic() - t0 < 30
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
    assert f"rank 0 of 2: rank 1 could not start: {tmp / 'missing.yaml'}: " in res[0][1], res[0][1]
    assert not (tmp / "run").exists()


@pytest.mark.parametrize("rank", [0, 1])
def test_a_signal_ends_the_wait_for_the_other_ranks(tmp, rank):
    """A rank waiting at start for the others (rank 0 for rank 1, rank 1 for rank 0's comparison) stops on SIGTERM
    at once, not after train.dist_timeout_s (60 s here)."""
    port, cfg = free_port(), cfg_file(tmp, "a", timeout=60)
    if rank == 1:  # rank 0 would compare at once: a store alone stands for a rank 0 that is slow to start
        store = subprocess.Popen([sys.executable, "-c", STORE, str(port)], stdout=subprocess.PIPE, text=True)
        assert store.stdout.readline().strip() == "ready"
    p = subprocess.Popen([TRAIN, str(cfg), "--quiet"], env=env_for(rank, 2, port), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3)
        assert p.poll() is None, p.communicate()
        t0 = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=90)
        assert time.monotonic() - t0 < 10
    finally:
        p.kill()
        if rank == 1:
            store.kill()
    awaited = "rank 1" if rank == 0 else "rank 0's comparison of the ranks"
    assert p.returncode != 0 and len(err.strip().splitlines()) == 1, err
    assert f"rank {rank} of 2: stopped by SIGTERM or SIGINT while waiting for {awaited}" in err, err


STORE = """import sys, time
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", int(sys.argv[1]), 3, True, wait_for_workers=False)
print("ready", flush=True)
time.sleep(600)
"""


def test_agreeing_ranks_train(tmp):
    res = launch([cfg_file(tmp, "a"), cfg_file(tmp, "a")])
    assert all(rc == 0 for rc, _ in res), res
    assert (tmp / "run" / "checkpoints" / "step-00000004").is_dir()


def test_a_text_file_that_differs_under_the_same_path_is_refused(tmp):
    """data.text on each node's own disk: the same name and size, other bytes (a stale or half-copied file)."""
    cfg = cfg_file(tmp, "a", text="corpus.txt")
    gpl = pathlib.Path("/usr/share/common-licenses/GPL-3").read_bytes()
    for node, data in ((tmp / "node0", gpl), (tmp / "node1", gpl[::-1])):
        node.mkdir()
        (node / "corpus.txt").write_bytes(data)
    res = launch([cfg, cfg], cwds={0: tmp / "node0", 1: tmp / "node1"})
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "ranks disagree before the first step: data.text content is '" in err, err
        assert f"({len(gpl)} bytes)' on rank 1" in err, err
    assert not (tmp / "run").exists()


@pytest.mark.parametrize("case", ["tokens", "truncated"])
def test_a_dataset_whose_shards_differ_under_the_same_path_is_refused(tmp, case):
    """data.dataset on each node's own disk with the same index.json: a shard with other tokens (a stale copy) trained
    silently on both ranks; a truncated one stopped rank 1 alone, rank 0 learning only that another rank died."""
    corpus = tmp / "corpus"
    corpus.mkdir()
    for name in ("GPL-3", "Apache-2.0"):
        shutil.copy(f"/usr/share/common-licenses/{name}", corpus / f"{name}.txt")
    run_cli("drope-data", "prepare", "--input", corpus, "--train-tokenizer", "--vocab-size", 512, "--out",
            tmp / "node0" / "ds")
    shutil.copytree(tmp / "node0", tmp / "node1")
    shard = tmp / "node1" / "ds" / "train" / "shard_00000.bin"
    b = shard.read_bytes()
    tokens = [b[i:i + 2] for i in range(32, 2032, 2)]  # uint16 after the 32-byte header: reversed, all in vocabulary
    shard.write_bytes(b[:32] + b"".join(tokens[::-1]) + b[2032:] if case == "tokens" else b[: len(b) // 2])
    cfg = tmp / "a.yaml"
    cfg.write_text(f"run: {{name: c, out_dir: {tmp / 'run'}, seed: 5}}\n"
                   "model: {preset: micro, max_position: 32, vocab_size: 512}\n"
                   "data: {dataset: ds, seq_len: 32, batch_size: 8}\n"
                   "train: {steps: 4, log_every: 1, eval_batches: 2, dist_timeout_s: 20}\n")
    res = launch([cfg, cfg], cwds={0: tmp / "node0", 1: tmp / "node1"})
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "ranks disagree before the first step: data.dataset shards is '" in err, err
    assert not (tmp / "run").exists()


def test_a_differing_prefetch_switch_is_refused(tmp):
    """DROPE_SHARD_PREFETCH decides which all-gathers a rank of a sharded run starts: set on one node only, the
    ranks' collectives would pair up wrongly."""
    cfg = cfg_file(tmp, "a", shard="params")
    res = launch([cfg, cfg], envs={1: {"DROPE_SHARD_PREFETCH": "0"}})
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "DROPE_SHARD_PREFETCH is '1' on rank 0 but '0' on rank 1" in err, err


def test_a_differing_libtorch_is_refused(tmp):
    """Ranks that loaded different LibTorch builds would run different kernels through the same collectives. The
    drope-train binary is the same on both ranks here, so the LibTorch rank 1 reports is stood in for by its test
    hook; rank 0's value is the one this process loaded (the test environment's torch)."""
    import torch

    cfg = cfg_file(tmp, "a")
    res = launch([cfg, cfg], envs={1: {"DROPE_TEST_FAULTS": "1", "DROPE_FAULT_LIBTORCH": "2.0.0 (another build)"}})
    loaded = f"{torch.__version__.split('+')[0]} (commit {torch.version.git_version}"
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert f"LibTorch is '{loaded}" in err and "' on rank 0 but '2.0.0 (another build)' on rank 1" in err, err
    assert not (tmp / "run" / "checkpoints").exists()


def checkpoints(run_dir):
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step-*")) if (run_dir / "checkpoints").is_dir() \
        else []


def train_alone(node, cfg, steps):
    """A one-process run of `cfg` in `node` (its relative run.out_dir), then its checkpoints after `steps` removed:
    a run directory as an interrupted run leaves it."""
    node.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in DIST_VARS}
    subprocess.run([TRAIN, str(cfg), "--quiet"], cwd=node, env=dict(env, OMP_NUM_THREADS="1"), check=True,
                   timeout=120)
    for p in (node / "run" / "checkpoints").glob("step-*"):
        if int(p.name.split("-")[1]) > steps:
            shutil.rmtree(p)


@pytest.mark.parametrize("case", ["older", "none", "other-run"])
def test_ranks_that_would_resume_from_different_checkpoints_are_refused(tmp, case):
    """run.out_dir on node-local disks (each rank's working directory here): rank 0 finds step 4, rank 1 an older
    checkpoint, none, or the same step of another run. Resumed, they would train different weights from different
    steps (or rank 1 from scratch) through the same all-reduces."""
    cfg = cfg_file(tmp, "a", out="run", steps=6, ckpt=2)
    node0, node1 = tmp / "node0", tmp / "node1"
    train_alone(node0, cfg, 4)
    if case == "older":
        shutil.copytree(node0, node1)
        shutil.rmtree(node1 / "run" / "checkpoints" / "step-00000004")
    elif case == "none":
        node1.mkdir()
    else:
        train_alone(node1, cfg, 4)
    before = checkpoints(node0 / "run"), checkpoints(node1 / "run")
    t0 = time.monotonic()
    res = launch([cfg, cfg], extra={0: ["--resume"], 1: ["--resume"]}, cwds={0: node0, 1: node1})
    assert time.monotonic() - t0 < 60
    theirs = {"older": "'step-00000002 (state.json ", "none": "'(none)' on rank 1", "other-run": "'step-00000004 ("}
    for rc, err in res:
        assert rc != 0, err
        assert not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "ranks disagree before the first step: the newest checkpoint in run.out_dir is 'step-00000004 (" \
            in err, err
        assert theirs[case] in err, err
    assert (checkpoints(node0 / "run"), checkpoints(node1 / "run")) == before  # nothing trained, nothing written


def test_a_checkpoint_only_one_rank_sees_refuses_a_fresh_start_on_every_rank(tmp):
    """Without --resume, a checkpoint in rank 1's run.out_dir alone: every rank stops naming it (not rank 1 alone,
    with rank 0 left to find out at its first collective)."""
    cfg = cfg_file(tmp, "a", out="run", steps=6, ckpt=2)
    node0, node1 = tmp / "node0", tmp / "node1"
    node0.mkdir()
    train_alone(node1, cfg, 4)
    res = launch([cfg, cfg], cwds={0: node0, 1: node1})
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "the newest checkpoint in run.out_dir is '(none)' on rank 0 but 'step-00000004 (" in err, err
    assert not (node0 / "run").exists()


def test_a_run_directory_that_only_rank_0_sees_is_refused_at_start(tmp):
    """run.out_dir on each node's own disk: with a sharded optimizer every rank writes its piece into rank 0's
    staging directory at each checkpoint, and every rank resumes from run.out_dir's checkpoints. Refused before the
    first step, not at the first checkpoint or the first restart."""
    cfg = cfg_file(tmp, "a", out="run", steps=6, ckpt=2, shard="optimizer")
    node0, node1 = tmp / "node0", tmp / "node1"
    node0.mkdir()
    node1.mkdir()
    res = launch([cfg, cfg], cwds={0: node0, 1: node1})
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert "run.out_dir must be one directory that every rank sees (a shared filesystem)" in err, err
    assert "rank 1 of 2: run.out_dir run is not the directory rank 0 holds" in res[1][1], res[1][1]
    assert not (node0 / "run").exists() and not (node1 / "run").exists()  # a refused start leaves nothing


def refused_on_every_rank(res, needle):
    for rc, err in res:
        assert rc != 0 and not any(b in err for b in BAD) and len(err.strip().splitlines()) == 1, err
        assert needle in err, err


def test_a_text_directory_that_differs_under_the_same_path_is_refused(tmp):
    """data.text as a directory (every file under it, in order): node-local copies with other bytes are refused, as
    other bytes in one file are."""
    cfg = cfg_file(tmp, "a", text="corpus")
    gpl = pathlib.Path("/usr/share/common-licenses/GPL-3").read_bytes()
    for node, data in ((tmp / "node0", gpl), (tmp / "node1", gpl[::-1])):
        (node / "corpus").mkdir(parents=True)
        (node / "corpus" / "a.txt").write_bytes(data)
    res = launch([cfg, cfg], cwds={0: tmp / "node0", 1: tmp / "node1"})
    refused_on_every_rank(res, "ranks disagree before the first step: data.text content is '")
    assert not (tmp / "run").exists()


def write_tiny_gguf(path, rope_base):
    import gguf
    import numpy as np

    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    for k, v in {"block_count": 2, "context_length": 64, "embedding_length": 64, "feed_forward_length": 128,
                 "attention.head_count": 4, "attention.head_count_kv": 2, "rope.dimension_count": 16,
                 "vocab_size": 256}.items():
        w.add_uint32(f"llama.{k}", v)
    w.add_float32("llama.rope.freq_base", rope_base)
    w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    shapes = {"token_embd.weight": (256, 64), "output_norm.weight": (64,), "output.weight": (256, 64)}
    for i in range(2):
        shapes.update({f"blk.{i}.attn_norm.weight": (64,), f"blk.{i}.ffn_norm.weight": (64,),
                       f"blk.{i}.attn_q.weight": (64, 64), f"blk.{i}.attn_k.weight": (32, 64),
                       f"blk.{i}.attn_v.weight": (32, 64), f"blk.{i}.attn_output.weight": (64, 64),
                       f"blk.{i}.ffn_gate.weight": (128, 64), f"blk.{i}.ffn_up.weight": (128, 64),
                       f"blk.{i}.ffn_down.weight": (64, 128)})
    for name, shape in shapes.items():
        a = 1.0 + 0.1 * rng.standard_normal(shape) if len(shape) == 1 else 0.1 * rng.standard_normal(shape)
        w.add_tensor(name, a.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_a_gguf_init_that_differs_under_the_same_path_is_refused(tmp):
    """run.init as a GGUF file: its metadata is the model's config. Files that differ only in the RoPE base are
    refused (rank 1 would compute its gradients with another base than the weights broadcast from rank 0)."""
    for node, base in ((tmp / "node0", 10000.0), (tmp / "node1", 500000.0)):
        node.mkdir()
        write_tiny_gguf(node / "m.gguf", base)
    cfg = tmp / "a.yaml"
    cfg.write_text(CFG.format(out=tmp / "run", **BASE).replace("seed: 5}", "seed: 5, init: m.gguf}"))
    res = launch([cfg, cfg], cwds={0: tmp / "node0", 1: tmp / "node1"})
    refused_on_every_rank(res, "ranks disagree before the first step: run.init GGUF header is '")
    assert not (tmp / "run").exists()


def test_a_differing_compute_dtype_is_refused(tmp):
    """train.dtype bfloat16 computes in bf16 only where the CPU multiplies it natively (or DROPE_BF16_EMULATED=1):
    nodes that differ would average gradients of float32 and bf16 computations."""
    cfg = tmp / "a.yaml"
    cfg.write_text(CFG.format(out=tmp / "run", **BASE).replace("train: {", "train: {dtype: bfloat16, "))
    res = launch([cfg, cfg], envs={0: {"DROPE_BF16_EMULATED": "0"}, 1: {"DROPE_BF16_EMULATED": "1"}})
    if all(rc == 0 for rc, _ in res):  # a CPU with native bf16 computes in bf16 on both ranks
        pytest.skip("this CPU multiplies bf16 natively: both ranks compute in bf16")
    refused_on_every_rank(res, "the compute dtype is 'float32' on rank 0 but 'bfloat16' on rank 1")


def test_a_differing_foreign_checkpoint_flag_is_refused(tmp):
    cfg = cfg_file(tmp, "a")
    res = launch([cfg, cfg], extra={0: ["--allow-foreign-checkpoint"]})
    refused_on_every_rank(res, "--allow-foreign-checkpoint is 'given' on rank 0 but 'not given' on rank 1")


def test_a_local_rank_outside_its_node_is_refused(tmp):
    cfg = cfg_file(tmp, "a")
    res = launch([cfg, cfg], envs={0: {"LOCAL_WORLD_SIZE": "2"}, 1: {"LOCAL_WORLD_SIZE": "2", "LOCAL_RANK": "7"}})
    rc, err = res[1]
    assert rc != 0 and "environment: LOCAL_RANK=7 must be below LOCAL_WORLD_SIZE=2" in err, err
    assert res[0][0] != 0
