#!/usr/bin/env python3
"""Tokeniser benchmark (not a test): drope's byte-level BPE (`drope-data prepare --threads N`) against HF
`tokenizers` (`Tokenizer.encode_batch_fast` on a rayon pool of N threads) on the same tokenizer.json and the
same documents, side by side in one run on this machine. The ids must be identical: every document's HF ids
followed by EOS, in order, must equal the tokens of the shards drope wrote (the script stops otherwise).

Timed: drope's tokenize phase as `prepare` reports it (documents read, tokenised on N threads and written to
shards in order; the validating first pass and process start-up are not in it, the whole process is shown
beside it) and HF's `encode_batch_fast` call on the list of documents already in memory; each the fastest of
`--repeats` runs. MB/s counts UTF-8 bytes of document text.

The documents are the "text" fields of a JSON Lines file (default: the Austen corpus that
`scripts/make_corpus.sh --small` writes); the tokenizer is `--tokenizer`, or a GPT-2-style byte-level BPE
trained here with HF tokenizers on the same documents (`--vocab`).

  .venv/bin/python bench/tokenizer.py --threads 1,2 --repeats 3
  .venv/bin/python bench/tokenizer.py --docs corpus.jsonl --tokenizer path/to/tokenizer.json
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_DOCS = ROOT / "runs" / "corpus" / "small" / "docs.jsonl"
EOS = "<|endoftext|>"


def read_docs(path):
    docs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                text = json.loads(line)["text"]
                if text.strip(" \t\r\n"):
                    docs.append(text)
    return docs


def train_tokenizer(docs, vocab, path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=[EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(docs, trainer=trainer)
    path.parent.mkdir(parents=True, exist_ok=True)
    tok.save(str(path))


def hf_worker(tok_path, docs_path, repeats, ids_out):
    """Runs in its own process so that RAYON_NUM_THREADS takes effect: fastest encode_batch_fast of `repeats`."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tok_path)
    docs = read_docs(docs_path)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = encode(docs, add_special_tokens=False)
        best = min(best, time.perf_counter() - t0)
    eos = tok.token_to_id(EOS)
    flat = []
    for e in out:
        flat += e.ids
        flat.append(eos)
    pathlib.Path(ids_out).write_text(json.dumps(flat))
    print(json.dumps({"seconds": best, "method": encode.__name__}))


def shard_tokens(ds):
    index = json.loads((ds / "index.json").read_text())
    out = []
    for sh in index["splits"]["train"]["shards"]:
        raw = (ds / sh["file"]).read_bytes()
        width = int.from_bytes(raw[16:20], "little")
        body = raw[32:]
        out += [int.from_bytes(body[i:i + width], "little") for i in range(0, len(body), width)]
    return out


def run_ours(args, tok, threads, out):
    best_tok = best_proc = float("inf")
    for r in range(args.repeats):
        ds = out / f"ds-{threads}-{r}"
        t0 = time.perf_counter()
        p = subprocess.run([str(args.bin / "drope-data"), "prepare", "--input", str(args.docs), "--tokenizer", str(tok),
                            "--out", str(ds), "--val-fraction", "0", "--threads", str(threads),
                            "--shard-tokens", str(1 << 30)], capture_output=True, text=True, check=True)
        best_proc = min(best_proc, time.perf_counter() - t0)
        m = re.search(r"in ([0-9.]+) s \(", p.stdout)
        if not m:
            sys.exit(f"cannot find the tokenize time in drope-data's output:\n{p.stdout}")
        best_tok = min(best_tok, float(m.group(1)))
    return best_tok, best_proc, shard_tokens(ds)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=pathlib.Path, default=DEFAULT_DOCS, help="JSON Lines with a \"text\" field")
    ap.add_argument("--tokenizer", type=pathlib.Path, help="tokenizer.json (default: train one, --vocab)")
    ap.add_argument("--vocab", type=int, default=24000, help="vocabulary of the BPE trained when no --tokenizer")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", type=pathlib.Path, default=ROOT / "build", help="directory holding drope-data")
    ap.add_argument("--hf-worker", nargs=4, metavar=("TOK", "DOCS", "REPEATS", "IDS_OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        return hf_worker(args.hf_worker[0], args.hf_worker[1], int(args.hf_worker[2]), args.hf_worker[3])
    if not args.docs.is_file():
        sys.exit(f"{args.docs}: not found (run scripts/make_corpus.sh --small, or pass --docs FILE.jsonl)")
    if args.repeats < 1:
        sys.exit("--repeats must be at least 1")
    threads = [int(t) for t in args.threads.split(",")]
    docs = read_docs(args.docs)
    mb = sum(len(d.encode()) for d in docs) / 1e6
    with tempfile.TemporaryDirectory(prefix="bench_tokenizer-") as tmp:
        tmp = pathlib.Path(tmp)
        tok = args.tokenizer
        if tok is None:
            tok = tmp / "tok" / "tokenizer.json"
            train_tokenizer(docs, args.vocab, tok)
        merges = len(json.loads(tok.read_text(encoding="utf-8"))["model"]["merges"])
        print(f"{len(docs)} documents, {mb:.2f} MB ({args.docs.name}); tokenizer {tok.name}, {merges} merges; "
              f"fastest of {args.repeats}; CPUs available: {len(os.sched_getaffinity(0))}")
        print("\n| threads | drope tokenize s | drope MB/s | drope whole process s | HF encode_batch_fast s | "
              "HF MB/s | drope / HF speed | ids identical |\n|---:|---:|---:|---:|---:|---:|---:|---|", flush=True)
        for n in threads:
            ours_s, proc_s, ours_ids = run_ours(args, tok, n, tmp)
            env = dict(os.environ, RAYON_NUM_THREADS=str(n), TOKENIZERS_PARALLELISM="true" if n > 1 else "false")
            ids_file = tmp / f"hf-{n}.json"
            p = subprocess.run([sys.executable, __file__, "--hf-worker", str(tok), str(args.docs), str(args.repeats),
                                str(ids_file)], capture_output=True, text=True, check=True, env=env)
            hf = json.loads(p.stdout.strip().splitlines()[-1])
            hf_ids = json.loads(ids_file.read_text())
            same = hf_ids == ours_ids
            print(f"| {n} | {ours_s:.3f} | {mb / ours_s:.2f} | {proc_s:.3f} | {hf['seconds']:.3f} | "
                  f"{mb / hf['seconds']:.2f} | {hf['seconds'] / ours_s:.2f}x | {'yes' if same else 'NO'} "
                  f"({len(ours_ids)} tokens) |", flush=True)
            if not same:
                first = next((i for i, (a, b) in enumerate(zip(hf_ids, ours_ids)) if a != b),
                             min(len(hf_ids), len(ours_ids)))
                sys.exit(f"ids differ at token {first} (HF {len(hf_ids)} tokens, drope {len(ours_ids)})")


if __name__ == "__main__":
    main()
