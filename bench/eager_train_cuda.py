"""The eager PyTorch side of scripts/gpu-check.sh's training stage: what people run instead of drope-train on a
GPU. HF transformers Qwen2ForCausalLM at qwen2-0.5b's shape (random weights, SDPA attention), bf16 autocast
with float32 weights, fused torch.optim.AdamW with the stage's hyper-parameters (lr 3e-4, betas 0.9/0.95,
weight decay 0.1 on matrices, clip 1.0), seq 1024 x batch 16, random token ids. Writes OUT/log.jsonl with one
line per step in drope-train's format (step, tokens, tokens_per_s, loss) plus peak CUDA memory, so the summary
reads both sides the same way.

  python bench/eager_train_cuda.py OUT [--steps 8] [--seq-len 1024] [--batch 16] [--device cuda|cpu]
                                       [--shape qwen2-0.5b|tiny] [--compile]

--compile runs the same model through torch.compile, one decoder layer at a time (regional compilation, as
torchtitan compiles its blocks: the 24 identical layers share one compiled graph, so compiling takes seconds, not
minutes); the first steps include the compilation, and the summary reads the steps after the first two.

--device cpu --shape tiny is gpu-check's rehearsal on the CPU (drope's tiny preset as an HF Qwen2 model).
"""
import argparse
import json
import os
import pathlib
import sys
import time

# Qwen/Qwen2-0.5B's config.json (the shape of drope's qwen2-0.5b preset), and drope's tiny preset.
SHAPES = {
    "qwen2-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                       num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1e6),
    "tiny": dict(vocab_size=1024, hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256, rope_theta=1e4),
}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--shape", choices=tuple(SHAPES), default="qwen2-0.5b")
    ap.add_argument("--compile", action="store_true", help="torch.compile each decoder layer (regional compilation)")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.seq_len < 2 or a.batch < 1:
        ap.error("--steps, --batch must be >= 1 and --seq-len >= 2")
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cuda = a.device == "cuda"
    if cuda and not torch.cuda.is_available():
        print("error: --device cuda: no CUDA device", file=sys.stderr)
        return 1
    # use_cache=False: training keeps no KV cache (with it, every layer would also store its K/V and the compiled
    # layers would recompile on the cache state).
    cfg = Qwen2Config(**SHAPES[a.shape], rms_norm_eps=1e-6, tie_word_embeddings=True, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model = Qwen2ForCausalLM(cfg).to(dev).train()
    if a.compile:
        for layer in model.model.layers:
            layer.compile()
    params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), fused=True)  # fused AdamW runs on the CPU too
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = a.out / f"log.jsonl.tmp.{os.getpid()}"
    g = torch.Generator(device=dev).manual_seed(0)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t_start = time.perf_counter()
    with open(tmp, "w") as f:
        for step in range(1, a.steps + 1):
            x = torch.randint(0, 256, (a.batch, a.seq_len), generator=g, device=dev)
            sync()
            t0 = time.perf_counter()
            with torch.autocast(a.device, dtype=torch.bfloat16):
                loss = model(input_ids=x, labels=x).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            sync()
            dt = time.perf_counter() - t0
            rec = {"step": step, "tokens": step * a.batch * a.seq_len, "tokens_per_s": a.batch * a.seq_len / dt,
                   "loss": loss.item(), "elapsed_s": time.perf_counter() - t_start,
                   "peak_cuda_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else 0.0}
            f.write(json.dumps(rec) + "\n")
            kind = "compiled" if a.compile else "eager"
            print(f"{kind} step {step}/{a.steps} | loss {rec['loss']:.4f} | {rec['tokens_per_s'] / 1e3:.1f}k tok/s | "
                  f"peak {rec['peak_cuda_gib']:.1f} GiB", flush=True)
    os.replace(tmp, a.out / "log.jsonl")
    print(f"HF Qwen2ForCausalLM{' (torch.compile per decoder layer)' if a.compile else ''}: "
          f"{params / 1e6:.2f}M params, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name(0) if cuda else 'CPU'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
