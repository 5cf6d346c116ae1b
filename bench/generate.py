#!/usr/bin/env python3
"""Generation benchmark (not a test): drope's greedy generation with its KV cache against HF transformers'
`generate` on the same random Llama model, side by side in one run on this machine.

For each context length, each implementation runs in its own process (so that peak RSS is its own):
prefill tokens/s = context / (time from the call to the first generated token); decode tokens/s = 1 / (mean
time per later token), timed inside the generation (drope: GenerateStats; HF: a streamer's timestamps),
each the fastest of 3 runs after a warm-up.
Prompts are random token ids; greedy decoding; both on CPU float32 with the same thread count.

  .venv/bin/python bench/generate.py --contexts 2048,8192,32768 --new-tokens 64 --threads 2
"""
import argparse
import json
import pathlib
import sys
import tempfile
import time

from benchlib import ROOT, print_result, run_worker


def make_model(path, args):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.hidden * 3,
                      num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                      max_position_embeddings=max(args.contexts) + args.new_tokens + 8, tie_word_embeddings=True)
    LlamaForCausalLM(cfg).save_pretrained(path)


def hf_worker(model_dir, context, new_tokens, threads, seed):
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(0, model.config.vocab_size, (1, context), generator=g)

    class Clock:
        # A generate() streamer: put() gets the prompt, then each new token as it is chosen.
        def __init__(self):
            self.times = []

        def put(self, value):
            self.times.append(time.perf_counter())

        def end(self):
            pass

    def run():
        c = Clock()
        t0 = time.perf_counter()
        with torch.no_grad():
            model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False,
                           pad_token_id=0, streamer=c)
        # times[0]: prompt, times[1]: first token (end of prefill), times[-1]: last token.
        return c.times[1] - t0, (c.times[-1] - c.times[1]) / (len(c.times) - 2)

    run()  # warm-up
    runs = [run() for _ in range(3)]  # fastest of 3, as drope-bench generate
    t1 = min(r[0] for r in runs)
    per_token = min(r[1] for r in runs)
    print_result({"impl": "hf", "context": context, "new_tokens": new_tokens, "threads": threads,
                  "prefill_s": t1, "prefill_tok_s": context / t1, "decode_s_per_token": per_token,
                  "decode_tok_s": 1 / per_token, "attn_implementation": model.config._attn_implementation})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contexts", default="2048,8192,32768")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=2048)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--bin", default=str(ROOT / "build"))
    ap.add_argument("--out", default="", help="write the rows as JSON here")
    ap.add_argument("--hf-worker", nargs=4, metavar=("MODEL", "CONTEXT", "NEW", "THREADS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.hf_worker:
        m, c, n, t = args.hf_worker
        return hf_worker(m, int(c), int(n), int(t), 0)
    args.contexts = [int(x) for x in args.contexts.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = pathlib.Path(tmp) / "model"
        make_model(model_dir, args)
        print(f"model: Llama hidden {args.hidden}, {args.layers} layers, {args.heads}/{args.kv_heads} heads, "
              f"vocab {args.vocab}; {args.threads} threads; {args.new_tokens} decoded tokens", flush=True)
        print("| context | impl | prefill tok/s | decode tok/s | peak RSS MB |\n|---:|---|---:|---:|---:|", flush=True)
        for c in args.contexts:
            # drope-bench generate prints its result as the first line
            ours = run_worker([pathlib.Path(args.bin) / "drope-bench", "generate", "--model", model_dir,
                               "--context", c, "--new-tokens", args.new_tokens, "--threads", args.threads], line=0)
            ours.pop("tokens", None)
            hf = run_worker([sys.executable, __file__, "--hf-worker", model_dir, c, args.new_tokens, args.threads])
            for r in (ours, hf):
                print(f"| {c} | {r['impl']} | {r['prefill_tok_s']:.0f} | {r['decode_tok_s']:.1f} | "
                      f"{r['peak_rss_mb']:.0f} |", flush=True)
            print(f"| {c} | ratio | {ours['prefill_tok_s'] / hf['prefill_tok_s']:.2f}x | "
                  f"{ours['decode_tok_s'] / hf['decode_tok_s']:.2f}x | "
                  f"{ours['peak_rss_mb'] / hf['peak_rss_mb']:.2f}x |",
                  flush=True)
            rows += [ours, hf]
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
