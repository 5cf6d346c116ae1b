"""The DroPE pipeline rehearsed at a real model's shape on the CPU.

  bash studies/run.sh rehearse [--shape smollm-360m|llama2-7b-2l|tiny] [--steps N] [--seq-len L] [--nproc 2]
                               [--batch B] [--out DIR] [--bin DIR] [--force]

From a random-weight HF directory written by transformers at the real config to an HF directory transformers
loads again, with the real CLIs; one summary line per stage (name, ok / FAIL, seconds, the key numbers):

  hf-init      transformers' LlamaForCausalLM at the shape's config, random weights (seeded), save_pretrained
               (safetensors), with a byte-level BPE tokenizer trained on /usr/share/common-licenses (HF tokenizers,
               at most the shape's vocabulary size) saved beside it
  data         drope-data prepare of /usr/share/common-licenses (paragraphs) with that tokenizer
  drop         drope-model drop --qk-norm qk: NoPE in every layer, QK-norm (weight 1)
  recalibrate  drope-train, phase drope, run.init = the dropped model, train.shard params + activation
               checkpointing full, float32 on the CPU, AdamW at the recipe's lr 1e-4 (tiny: 1e-3), cosine, under
               torchrun --no-python --standalone --nproc_per_node=2 (--nproc; Gloo, OMP_NUM_THREADS=1 per rank);
               first / last loss, tokens/s, peak RSS per rank, rank 0's tensor peak
               (DROPE_TRACK_TENSOR_MEMORY); every tensor of the final checkpoint must differ from the dropped
               model's
  ppl          drope-eval ppl of the final checkpoint on the held-out split at the training length
  niah         drope-eval niah (single_1, a few trials, a short generation) at twice the training length
  export       drope-model convert --format drope-reference of the final (sharded run's) checkpoint: the DroPE
               authors' HF format (model_type llama_drope, attention_type qk_norm_nope)
  parity       transformers loads the export (LlamaForCausalLM with the authors' attention, strict state dict:
               drope_reference.py) and its logits on a fixed batch must match drope-eval logits of the
               checkpoint: max |Δ| / max |logit| < 1e-4

Writes into --out (default runs/rehearse/<shape>): hf/, data/, dropped/, recal.yaml, recal/ (the run),
eval/, export/, parity/, logs/<stage>.log (each command and its output) and summary.json (rewritten
atomically after every stage). Exit status 0 when every stage is ok, 1 when one failed (the following stages
are skipped), 2 for bad arguments. Defaults: --shape smollm-360m, --nproc 2, --bin $DROPE_BIN or build/.
Memory: smollm-360m needs about 8 GB per rank; llama2-7b-2l about 10 GB per rank at 2 ranks with glibc's default
heap policy (GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072; drope's own needs more): docs/results/rehearsal.md,
which also has measured runs.
"""
from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import pathlib
import platform
import shlex
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field

import yaml

from drope_scripts import cli, results
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import ROOT, ToolError, remove_outputs, run_logged

CORPUS = pathlib.Path("/usr/share/common-licenses")
TOOLS = ("drope-data", "drope-model", "drope-train", "drope-eval")
OUTPUTS = ("hf", "data", "dropped", "recal.yaml", "recal", "eval", "export", "parity", "logs", "summary.json")
PARITY_TOL = 1e-4
WORLD = 2  # the default number of ranks (torchrun --nproc_per_node=2)
_DIST_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
              "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True)
class Shape:
    """A model shape (LlamaConfig arguments), its tokenizer's special tokens and the default run settings."""

    config: dict
    specials: tuple[str, ...]  # the tokenizer's special tokens, ids 0, 1, ...
    bos: str
    eos: str
    steps: int
    seq_len: int
    lr: float  # peak learning rate (cosine, 1 warm-up step)
    description: str
    extra: dict = field(default_factory=dict)


_COMMON = dict(hidden_act="silu", initializer_range=0.02, rms_norm_eps=1e-5, rope_theta=10000.0,
               attention_bias=False, mlp_bias=False)
SHAPES = {
    # HuggingFaceTB/SmolLM-360M's config.json
    "smollm-360m": Shape(dict(_COMMON, vocab_size=49152, hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                              num_attention_heads=15, num_key_value_heads=5, max_position_embeddings=2048,
                              tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
                         ("<|endoftext|>",), "<|endoftext|>", "<|endoftext|>", steps=4, seq_len=128, lr=1e-4,
                         description="SmolLM-360M (32 layers, 960 wide, 15/5 heads, vocab 49152, tied)"),
    # meta-llama/Llama-2-7b-hf's config.json with 2 of its 32 layers
    "llama2-7b-2l": Shape(dict(_COMMON, vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                               num_hidden_layers=2, num_attention_heads=32, num_key_value_heads=32,
                               max_position_embeddings=4096, tie_word_embeddings=False, bos_token_id=1,
                               eos_token_id=2),
                          ("<unk>", "<s>", "</s>"), "<s>", "</s>", steps=4, seq_len=128, lr=1e-4,
                          description="Llama-2-7B width, 2 layers (4096 wide, 11008 MLP, 32 heads, vocab 32000)"),
    # small enough for the test suite
    "tiny": Shape(dict(_COMMON, vocab_size=512, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                       tie_word_embeddings=True, bos_token_id=0, eos_token_id=0),
                  ("<|endoftext|>",), "<|endoftext|>", "<|endoftext|>", steps=3, seq_len=64, lr=1e-3,
                  description="tiny (2 layers, 64 wide, 4/2 heads, vocab 512, tied)"),
}


class StageFailed(RuntimeError):
    """A stage ran but its result is wrong (the message says what); numbers may say more."""

    def __init__(self, msg: str, numbers: dict | None = None):
        super().__init__(msg)
        self.numbers = numbers or {}


class Rehearsal:
    """The stages in order, their summary lines and summary.json."""

    def __init__(self, a: argparse.Namespace):
        self.a = a
        self.shape = SHAPES[a.shape]
        self.out: pathlib.Path = a.out
        self.bin: pathlib.Path = a.bin
        self.torchrun = pathlib.Path(sys.executable).parent / "torchrun"
        self.logs = self.out / "logs"
        self.ckpt = self.out / "recal" / "checkpoints" / f"step-{a.steps:08d}"
        self.doc = {"shape": a.shape, "description": self.shape.description, "config": self.shape.config,
                    "settings": {"steps": a.steps, "seq_len": a.seq_len, "batch": a.batch, "world": a.nproc,
                                 "shard": "params", "activation_checkpointing": "full", "dtype": "float32",
                                 "seed": a.seed},
                    "machine": machine(), "bin": str(self.bin), "stages": [], "ok": None}
        self.stage_name = ""

    # ---- running ---------------------------------------------------------------------------------------------
    def run(self, *cmd: object, env: dict | None = None) -> None:
        """Runs a command of the current stage, its output into logs/<stage>.log; a drope tool by its bare name."""
        cmd = [self.bin / c if isinstance(c, str) and c in TOOLS else c for c in cmd]
        self.doc["stages"][-1]["commands"].append(shlex.join(map(str, cmd)))
        run_logged(cmd, self.log_path(), env)

    def log_path(self) -> pathlib.Path:
        return self.logs / f"{self.stage_name}.log"

    def stage(self, name: str, fn) -> bool:
        self.stage_name = name
        rec = {"name": name, "status": "running", "seconds": None, "numbers": {}, "commands": []}
        self.doc["stages"].append(rec)
        t0 = time.monotonic()
        try:
            text, numbers = fn()
            status = "ok"
        except StageFailed as e:
            status, text, numbers = "FAIL", str(e), e.numbers
        except ToolError as e:
            status, text, numbers = "FAIL", f"{e} (log: {self.log_path()})", {}
        except Exception as e:  # any failure of a stage is reported; the summary is still written
            with open(self.log_path(), "a", encoding="utf-8") as f:
                traceback.print_exc(file=f)
            status, text, numbers = "FAIL", f"{type(e).__name__}: {e} (log: {self.log_path()})", {}
        rec.update(status=status, seconds=round(time.monotonic() - t0, 1), numbers=numbers)
        rec["line"] = f"[rehearse {self.a.shape}] {name:<11} {status:<4} {rec['seconds']:7.1f}s  {text}"
        print(rec["line"], flush=True)
        if status != "ok" and self.log_path().is_file():
            tail = self.log_path().read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
            print("\n".join("    " + t for t in tail), file=sys.stderr, flush=True)
        self.save()
        return status == "ok"

    def save(self) -> None:
        write_atomic(self.out / "summary.json", json.dumps(self.doc, indent=2) + "\n")

    def main(self) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        print(f"[rehearse {self.a.shape}] {self.shape.description}; {self.a.steps} steps at seq {self.a.seq_len}, "
              f"batch {self.a.batch} on {self.a.nproc} rank(s) (shard params, activation checkpointing full); "
              f"out {self.out}", flush=True)
        stages = [("hf-init", self.hf_init), ("data", self.data), ("drop", self.drop),
                  ("recalibrate", self.recalibrate), ("ppl", self.ppl), ("niah", self.niah),
                  ("export", self.export), ("parity", self.parity)]
        ok = True
        for name, fn in stages:
            if not ok:
                self.doc["stages"].append({"name": name, "status": "skipped", "seconds": 0, "numbers": {},
                                           "commands": []})
                continue
            ok = self.stage(name, fn)
        self.doc["ok"] = ok
        self.save()
        print(f"[rehearse {self.a.shape}] {'all stages ok' if ok else 'FAILED'}; summary {self.out / 'summary.json'}",
              flush=True)
        return 0 if ok else 1

    # ---- the stages ------------------------------------------------------------------------------------------
    def hf_init(self):
        import torch
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        s, hf = self.shape, self.out / "hf"
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=s.config["vocab_size"], special_tokens=list(s.specials),
                                      show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train(corpus_files(), trainer)
        for i, sp in enumerate(s.specials):
            if tok.token_to_id(sp) != i:
                raise StageFailed(f"special token {sp} has id {tok.token_to_id(sp)}, expected {i}")
        trained = tok.get_vocab_size()
        tok = pad_vocab(tok, s.config["vocab_size"])
        PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=s.bos, eos_token=s.eos).save_pretrained(hf)
        torch.manual_seed(self.a.seed)
        model = LlamaForCausalLM(LlamaConfig(**s.config))
        model.save_pretrained(hf)
        n = sum(p.numel() for p in model.parameters())
        del model
        size = sum(p.stat().st_size for p in hf.glob("*.safetensors"))
        nums = {"params": n, "tokenizer_vocab": tok.get_vocab_size(), "tokenizer_trained": trained,
                "model_vocab": s.config["vocab_size"], "safetensors_bytes": size}
        return (f"{n / 1e6:.1f}M params, {size / 2**30:.2f} GiB safetensors, tokenizer vocab "
                f"{tok.get_vocab_size()} ({trained} trained)"), nums

    def data(self):
        d = self.out / "data"
        self.run("drope-data", "prepare", "--input", CORPUS, "--paragraphs", "--tokenizer", self.out / "hf",
                 "--val-fraction", "0.1", "--seed", self.a.seed, "--no-progress", "--out", d)
        idx = json.loads((d / "index.json").read_text(encoding="utf-8"))
        train, val = idx["splits"]["train"]["tokens"], idx["splits"]["val"]["tokens"]
        need = self.a.steps * self.a.batch * (self.a.seq_len + 1)
        if train < need:
            raise StageFailed(f"{train} training tokens, the run needs {need}", {"train_tokens": train})
        return f"{train} train / {val} val tokens", {"train_tokens": train, "val_tokens": val}

    def drop(self):
        d = self.out / "dropped"
        self.run("drope-model", "drop", "--model", self.out / "hf", "--qk-norm", "qk", "--out", d)
        cfg = yaml.safe_load((d / "drope.yaml").read_text(encoding="utf-8"))
        model = cfg.get("model", cfg)
        pos, qk = model["positional"]["type"], model["qk_norm"]
        if pos != "nope" or qk != "qk":
            raise StageFailed(f"{d}/drope.yaml: positional {pos}, qk_norm {qk} (expected nope, qk)")
        return f"positional {pos}, qk_norm {qk}", {"positional": pos, "qk_norm": qk}

    def recalibrate(self):
        a, run_dir = self.a, self.out / "recal"
        cfg = self.out / "recal.yaml"
        cfg.write_text(
            f"# written by studies/run.sh rehearse ({a.shape}): DroPE recalibration, ZeRO-3 style, 2 ranks on the CPU\n"
            f"run: {{name: rehearse-{a.shape}, out_dir: {run_dir}, seed: {a.seed}, phase: drope, "
            f"init: {self.out / 'dropped'}}}\n"
            "drope: {qk_norm: qk}\n"
            f"data: {{dataset: {self.out / 'data'}, seq_len: {a.seq_len}, batch_size: {a.batch}, "
            f"micro_batch: {a.batch // a.nproc}}}\n"
            f"optim: {{lr: {self.shape.lr:.1e}, betas: [0.9, 0.95], weight_decay: 0.1}}\n"
            "schedule: {type: cosine, warmup: 1}\n"
            f"train: {{steps: {a.steps}, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 0, "
            "keep_last: 1, clip: 1.0,\n"
            "        dtype: float32, device: cpu, shard: params, activation_checkpointing: full}\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k not in _DIST_VARS}
        env.update(OMP_NUM_THREADS="1", DROPE_TRACK_TENSOR_MEMORY="1")
        rank_cmd: list[object] = [self.bin / "drope-train", cfg]
        rss_dir = self.logs / "rss"
        if pathlib.Path("/usr/bin/time").is_file():  # peak RSS of each rank
            rss_dir.mkdir(exist_ok=True)
            rank_cmd = ["bash", "-c", 'exec /usr/bin/time -f %M -o "$0/rank-$RANK.kb" "$@"', rss_dir, *rank_cmd]
        self.run(self.torchrun, "--no-python", "--standalone", f"--nproc_per_node={self.a.nproc}", *rank_cmd,
                 env=env)
        log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines()]
        steps = [j for j in log if "loss" in j]
        if not steps or steps[-1]["step"] != a.steps:
            raise StageFailed(f"{run_dir}/log.jsonl: expected loss lines up to step {a.steps}")
        first, last = steps[0], steps[-1]
        later = [j["tokens_per_s"] for j in steps[1:]] or [first["tokens_per_s"]]  # step 1 is the warm-up
        nums = {"loss_first": first["loss"], "loss_last": last["loss"], "tokens_per_s": statistics.median(later),
                "seconds_per_step": statistics.median(j2["elapsed_s"] - j1["elapsed_s"]
                                                      for j1, j2 in itertools.pairwise(steps))
                                    if len(steps) > 1 else None,
                "val_loss": next((j["val_loss"] for j in log if "val_loss" in j), None)}
        peaks = [j["tensor_bytes"]["peak"] for j in log if "tensor_bytes" in j]
        if peaks:
            nums["tensor_peak_rank0_bytes"] = max(peaks)
        if "shard_bytes" in first:
            nums["shard_bytes_rank0"] = first["shard_bytes"]
        rss = {p.stem: int(p.read_text().split()[-1]) * 1024 for p in sorted(rss_dir.glob("rank-*.kb"))}
        if rss:
            nums["peak_rss_bytes"] = rss
        changed, total, max_delta, unchanged = weights_changed(self.out / "dropped" / "model.safetensors",
                                                               self.ckpt / "model.safetensors")
        nums.update(tensors_changed=changed, tensors=total, max_abs_delta=max_delta)
        mem = ""
        if rss:
            mem += ", peak RSS " + " / ".join(f"{v / 2**20:.0f}" for v in rss.values()) + " MiB (ranks)"
        if peaks:
            mem += f", tensor peak {max(peaks) / 2**20:.0f} MiB (rank 0)"
        text = (f"loss {first['loss']:.4f} -> {last['loss']:.4f} ({a.steps} steps), "
                f"{nums['tokens_per_s']:.0f} tokens/s{mem}, {changed}/{total} tensors changed "
                f"(max |dw| {max_delta:.2e})")
        if unchanged:
            raise StageFailed(text + f"; unchanged: {', '.join(unchanged[:5])}", nums)
        if not all(math.isfinite(j["loss"]) for j in steps):
            raise StageFailed(text + "; a loss is not finite", nums)
        return text, nums

    def ppl(self):
        L = self.a.seq_len
        out = self.out / "eval" / "ppl"
        out.parent.mkdir(exist_ok=True)
        self.run("drope-eval", "ppl", "--model", self.ckpt, "--tokenizer", self.out / "data", "--data",
                 self.out / "data", "--lengths", L, "--stride", L, "--max-windows", 4,
                 "--label", "DroPE+QK (rehearsal)", "--out", out)
        doc = results.load(out.with_name("ppl.json"), "ppl")
        ppl = doc["summary"][f"ppl@{L}"]
        if not (isinstance(ppl, (int, float)) and math.isfinite(ppl) and ppl > 1):
            raise StageFailed(f"ppl@{L} = {ppl}")
        vocab = json.loads((self.out / "data" / "index.json").read_text())["tokenizer"]["vocab_size"]
        model_vocab = self.shape.config["vocab_size"]
        return (f"ppl@{L} {ppl:.1f} (vocab {model_vocab}; random weights)",
                {f"ppl@{L}": ppl, "vocab": vocab, "model_vocab": model_vocab})

    def niah(self):
        L = 2 * self.a.seq_len
        out = self.out / "eval" / "niah"
        self.run("drope-eval", "niah", "--model", self.ckpt, "--tokenizer", self.out / "data", "--tasks",
                 "single_1", "--lengths", max(L, 256), "--trials", 2, "--max-new-tokens", 8, "--out", out)
        doc = results.load(out.with_name("niah.json"), "niah")
        avg = doc["summary"]["avg"]
        if not (isinstance(avg, (int, float)) and 0 <= avg <= 100):
            raise StageFailed(f"niah avg = {avg}")
        return f"single_1@{max(L, 256)}: {avg:.1f} % (2 trials, 8 new tokens; random weights)", {"avg": avg}

    def export(self):
        d = self.out / "export"
        self.run("drope-model", "convert", "--model", self.ckpt, "--format", "drope-reference", "--out", d)
        cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
        files = sorted(p.name for p in d.iterdir())
        if cfg.get("attention_type") != "qk_norm_nope":
            raise StageFailed(f"{d}/config.json: attention_type {cfg.get('attention_type')}, expected qk_norm_nope")
        return (f"{cfg['model_type']} / {cfg['architectures'][0]}, attention_type {cfg['attention_type']}, "
                f"files {', '.join(files)}"), {"model_type": cfg["model_type"], "files": files}

    def parity(self):
        import numpy as np
        from safetensors.numpy import load_file

        from drope_scripts import drope_reference

        d = self.out / "parity"
        d.mkdir(exist_ok=True)
        vocab = json.loads((self.out / "data" / "index.json").read_text())["tokenizer"]["vocab_size"]
        T = min(64, self.a.seq_len)
        toks = np.random.default_rng(self.a.seed + 1).integers(0, vocab, size=(2, T)).tolist()
        (d / "tokens.json").write_text(json.dumps(toks))
        ours = {}
        for name, model in (("checkpoint", self.ckpt), ("export", self.out / "export")):
            self.run("drope-eval", "logits", "--model", model, "--tokens", d / "tokens.json", "--out",
                     d / f"ours-{name}.safetensors")
            ours[name] = load_file(str(d / f"ours-{name}.safetensors"))["logits"]
        t0 = time.monotonic()
        hf = drope_reference.load(self.out / "export")
        theirs = drope_reference.logits(hf, toks)
        del hf
        hf_seconds = time.monotonic() - t0
        rel = drope_reference.rel_err(ours["checkpoint"], theirs)
        rel_export = drope_reference.rel_err(ours["export"], ours["checkpoint"])
        nums = {"rel_err": rel, "rel_err_ours_export_vs_checkpoint": rel_export, "batch": [2, T],
                "max_abs_logit": float(np.abs(theirs).max()), "transformers_seconds": round(hf_seconds, 1)}
        text = (f"transformers vs ours: max rel err {rel:.2e} (limit {PARITY_TOL:g}) on 2x{T} tokens; "
                f"ours export vs checkpoint {rel_export:.1e}")
        if not rel < PARITY_TOL or not rel_export < PARITY_TOL:
            raise StageFailed(text, nums)
        return text, nums


def pad_vocab(tok, size: int):
    """The tokenizer with unreachable entries <|unused_N|> appended to its BPE vocabulary up to `size` (the
    model's), as real tokenizers are as large as their model's vocabulary: /usr/share/common-licenses holds
    too little text to train that many merges, and an id the random model generates must still decode."""
    from tokenizers import Tokenizer

    doc = json.loads(tok.to_str())
    vocab = doc["model"]["vocab"]
    for i in range(len(vocab), size):
        vocab[f"<|unused_{i}|>"] = i
    return Tokenizer.from_str(json.dumps(doc))


def corpus_files() -> list[str]:
    """The regular files under /usr/share/common-licenses, sorted."""
    files = sorted(str(p) for p in CORPUS.rglob("*") if p.is_file())
    if not files:
        raise StageFailed(f"no files under {CORPUS}")
    return files


def weights_changed(before: pathlib.Path, after: pathlib.Path) -> tuple[int, int, float, list[str]]:
    """Compares two model.safetensors tensor by tensor: (changed, total, max |Δ|, names of unchanged tensors)."""
    import numpy as np
    from safetensors import safe_open

    with safe_open(str(before), "numpy") as fa, safe_open(str(after), "numpy") as fb:
        names_a, names_b = set(fa.keys()), set(fb.keys())
        if names_a != names_b:
            raise StageFailed(f"{after} holds other tensors than {before}: "
                              f"{sorted(names_a ^ names_b)[:5]}")
        changed, max_delta, unchanged = 0, 0.0, []
        for n in sorted(names_a):
            x, y = fa.get_tensor(n), fb.get_tensor(n)
            if x.shape != y.shape:
                raise StageFailed(f"{n}: shape {x.shape} before, {y.shape} after")
            delta = float(np.abs(y.astype(np.float32) - x.astype(np.float32)).max()) if x.size else 0.0
            max_delta = max(max_delta, delta)
            if delta > 0:
                changed += 1
            else:
                unchanged.append(n)
    return changed, len(names_a), max_delta, unchanged


def machine() -> dict:
    """CPU model, cores, memory: what the numbers were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem = int(pathlib.Path("/proc/meminfo").read_text().split()[1]) * 1024
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem}


def parse(argv: list[str]) -> argparse.Namespace:
    ap = cli.Parser("rehearse", prog="studies/run.sh rehearse", description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="smollm-360m", choices=sorted(SHAPES),
                    help="model shape (default smollm-360m)")
    integer = cli.int_type()
    ap.add_argument("--steps", type=integer, help="recalibration steps (default: the shape's)")
    ap.add_argument("--seq-len", type=integer, help="training length (default: the shape's)")
    ap.add_argument("--nproc", type=integer, default=WORLD, help=f"ranks under torchrun (default {WORLD})")
    ap.add_argument("--batch", type=integer, help="global batch, a multiple of --nproc (default: --nproc)")
    ap.add_argument("--seed", type=cli.int_type(0), default=0)
    ap.add_argument("--out", type=pathlib.Path, help="output directory (default runs/rehearse/<shape>)")
    cli.add_build_option(ap, "DROPE_BIN", dest="bin")
    ap.add_argument("--force", action="store_true", help="replace the outputs of an earlier rehearsal in --out")
    a = ap.parse_args(argv)
    a.out = cli.caller_path(a.out) if a.out else None
    s = SHAPES[a.shape]
    a.steps = s.steps if a.steps is None else a.steps
    a.seq_len = s.seq_len if a.seq_len is None else a.seq_len
    if a.steps < 1:
        ap.error(f"--steps must be >= 1, got {a.steps}")
    if not 8 <= a.seq_len <= s.config["max_position_embeddings"]:
        ap.error(f"--seq-len must be in [8, {s.config['max_position_embeddings']}] for {a.shape}, got {a.seq_len}")
    if a.nproc < 1:
        ap.error(f"--nproc must be >= 1, got {a.nproc}")
    a.batch = a.nproc if a.batch is None else a.batch
    if a.batch < a.nproc or a.batch % a.nproc:
        ap.error(f"--batch must be a positive multiple of --nproc {a.nproc}, got {a.batch}")
    a.out = (a.out or ROOT / "runs" / "rehearse" / a.shape).resolve()
    ap.check(cli.out_dir, a.out, "--out")
    a.bin = cli.checked_build(ap, a, "DROPE_BIN", TOOLS, dest="bin").resolve()
    if not (pathlib.Path(sys.executable).parent / "torchrun").is_file():
        ap.error(f"no torchrun beside {sys.executable} (the project venv: scripts/setup.sh)")
    if a.out.is_dir() and any(a.out.iterdir()):
        if not a.force:
            ap.error(f"--out {a.out} is not empty (pass --force to replace an earlier rehearsal's outputs there)")
        remove_outputs(a.out, OUTPUTS)
    return a


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    a = parse(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    return Rehearsal(a).main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
