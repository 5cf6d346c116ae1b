"""Per-layer NoPE from HF: SmolLM3 (no_rope_layers, sliding-window layer types) against transformers' own
SmolLM3ForCausalLM with random weights, and the explicit override for RoPE-less checkpoints saved as plain
Llama (`drope-model convert --positional nope`, `run.init_positional: nope`)."""
import json

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, SmolLM3Config, SmolLM3ForCausalLM

from conftest import expect_error, expect_model_dir_error, our_logits, run_cli

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=None)
SEQ = 40  # longer than the sliding windows below

CASES = {
    # transformers' default plan: every 4th layer NoPE (SmolLM3-3B's pattern), rope_theta 2e6 by default.
    "interval_default": dict(),
    "interval_2_untied": dict(no_rope_layer_interval=2, tie_word_embeddings=False),
    "explicit_list_bias": dict(no_rope_layers=[0, 1, 0, 1], attention_bias=True,
                               rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
    # NoPE layers slide when use_sliding_window and sliding_window are set and layer_types is not given.
    "sliding_nope_layers": dict(no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=8),
    # layer_types given explicitly: RoPE and NoPE layers with and without the window.
    "explicit_layer_types": dict(no_rope_layers=[1, 0, 0, 1], use_sliding_window=True, sliding_window=6,
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention",
                                              "full_attention"]),
    "yarn_on_rope_layers": dict(no_rope_layers=[1, 1, 0, 1],
                                rope_parameters={"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4,
                                                 "original_max_position_embeddings": 16}),
}


def randomize(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():  # every tensor random (norms around 1) so a wrong mapping cannot hide
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
    return model.eval()


def smollm3(seed=0, **extra):
    cfg = SmolLM3Config(**{**BASE, **extra}, attn_implementation="eager")
    return randomize(SmolLM3ForCausalLM(cfg), seed)


def logits(model, toks):
    with torch.no_grad():
        return model(torch.tensor(toks)).logits.float().numpy()


def tokens(seed=1, batch=2, seq=SEQ):
    return np.random.default_rng(seed).integers(0, BASE["vocab_size"], size=(batch, seq)).tolist()


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_smollm3_matches_transformers(name, tmp):
    model = smollm3(seed=2, **CASES[name])
    model.save_pretrained(tmp / "hf")
    assert json.loads((tmp / "hf" / "config.json").read_text())["model_type"] == "smollm3"
    toks = tokens()
    ref = logits(model, toks)
    got = our_logits(tmp / "hf", toks, tmp)
    assert rel_err(got, ref) < 1e-4, f"{name}: max relative error {rel_err(got, ref):.3e}"
    # The plan our import built is the one transformers runs.
    info = run_cli("drope-model", "info", "--model", tmp / "hf").stdout
    plan = next(line for line in info.splitlines() if line.startswith("layers:")).split()[1:]
    cfg = model.config
    want = [("rope" if r else "nope") + (f"/w{cfg.sliding_window}" if t == "sliding_attention" else "")
            for r, t in zip(cfg.no_rope_layers, cfg.layer_types)]
    assert plan == want
    # Converted to our format (drope.yaml with a per-layer plan) the logits do not change.
    run_cli("drope-model", "convert", "--model", tmp / "hf", "--out", tmp / "ours")
    assert "layers:" in (tmp / "ours" / "drope.yaml").read_text()
    assert rel_err(our_logits(tmp / "ours", toks, tmp), ref) < 1e-4


def test_window_and_nope_layers_matter(tmp):
    """The same weights under another plan give other logits (so the matches above are not vacuous)."""
    a = smollm3(seed=3, no_rope_layers=[1, 0, 1, 0], use_sliding_window=True, sliding_window=8)
    b = SmolLM3ForCausalLM(SmolLM3Config(**BASE, no_rope_layers=[1, 0, 1, 0], attn_implementation="eager")).eval()
    c = SmolLM3ForCausalLM(SmolLM3Config(**BASE, no_rope_layers=[1, 1, 1, 1], attn_implementation="eager")).eval()
    b.load_state_dict(a.state_dict())
    c.load_state_dict(a.state_dict())
    toks = tokens(seed=4)
    assert rel_err(logits(b, toks), logits(a, toks)) > 1e-3
    assert rel_err(logits(c, toks), logits(b, toks)) > 1e-3


def write_config(d, **changes):
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "smollm3", **BASE}
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("changes,needles", [
    (dict(no_rope_layers=[1, 0, 1]), ["no_rope_layers", "3 entries", "num_hidden_layers is 4"]),
    (dict(no_rope_layers=[1, 0, 2, 1]), ["no_rope_layers", "entry 2", "0 (NoPE) or 1 (RoPE)"]),
    (dict(no_rope_layers="1,0,1,0"), ["no_rope_layers", "list"]),
    (dict(no_rope_layer_interval=0), ["no_rope_layer_interval"]),
    (dict(layer_types=["full_attention"] * 3), ["layer_types", "one entry per layer"]),
    (dict(layer_types=["full_attention", "chunked_attention", "full_attention", "full_attention"]),
     ["layer_types", "chunked_attention"]),
    (dict(layer_types=["sliding_attention"] * 4), ["sliding_window", "positive"]),
    (dict(layer_types=["sliding_attention"] * 4, sliding_window=-3), ["sliding_window"]),
])
def test_bad_smollm3_configs(changes, needles, tmp):
    d = write_config(tmp / "bad", **changes)
    expect_model_dir_error(d, tmp, str(d / "config.json"), *needles)


def nope_llama_checkpoint(d, seed=5, **extra):
    """A NoPE model (transformers' SmolLM3 with every layer NoPE) saved as a plain Llama checkpoint, the way
    RoPE-less models are published: config.json says llama, the weights are Llama's."""
    model = smollm3(seed=seed, no_rope_layers=[0, 0, 0, 0], **extra)
    model.save_pretrained(d.parent / (d.name + "-smol"))
    d.mkdir(exist_ok=True)
    cfg = LlamaConfig(**{**BASE, **extra})
    cfg.tie_word_embeddings = True
    LlamaForCausalLM(cfg).save_pretrained(d)
    (d / "model.safetensors").write_bytes((d.parent / (d.name + "-smol") / "model.safetensors").read_bytes())
    return model


def test_positional_override_for_nope_checkpoints_saved_as_llama(tmp):
    ckpt = tmp / "nope-llama"
    model = nope_llama_checkpoint(ckpt)
    toks = tokens(seed=6)
    ref = logits(model, toks)
    # Read as the Llama it claims to be, it is wrong (RoPE applied to NoPE weights) ...
    assert rel_err(our_logits(ckpt, toks, tmp), ref) > 1e-3
    # ... with the override it matches.
    run_cli("drope-model", "convert", "--model", ckpt, "--positional", "nope", "--out", tmp / "ours")
    assert "type: nope" in (tmp / "ours" / "drope.yaml").read_text()
    assert rel_err(our_logits(tmp / "ours", toks, tmp), ref) < 1e-4
    info = run_cli("drope-model", "info", "--model", ckpt, "--positional", "nope").stdout
    assert "layers: nope nope nope nope" in info
    # rope is accepted too (a no-op here); ALiBi is not a property of imported weights.
    assert "positional rope" in run_cli("drope-model", "info", "--model", ckpt, "--positional", "rope").stdout
    expect_error(run_cli("drope-model", "convert", "--model", ckpt, "--positional", "alibi", "--out", tmp / "x",
                         check=False), "--positional", "alibi")
    expect_error(run_cli("drope-model", "convert", "--model", ckpt, "--positional", "none", "--out", tmp / "x",
                         check=False), "--positional")
    assert not (tmp / "x").exists()


def test_init_positional_in_the_run_yaml(tmp):
    ckpt = tmp / "nope-llama"
    nope_llama_checkpoint(ckpt, seed=7, vocab_size=300)  # byte-level text data needs 256 ids
    text = tmp / "corpus.txt"
    text.write_text("".join(chr(97 + (i * 7) % 26) + (" " if i % 5 == 4 else "") for i in range(4000)))
    run_yaml = tmp / "run.yaml"
    run_yaml.write_text(f"run: {{name: t, out_dir: {tmp / 'run'}, phase: pretrain, init: {ckpt}, "
                        "init_positional: nope}\n"
                        f"data: {{text: {text}, seq_len: 16, batch_size: 2}}\n"
                        "train: {steps: 1, log_every: 1, eval_every: 0, checkpoint_every: 1}\n")
    run_cli("drope-train", run_yaml)
    saved = sorted((tmp / "run" / "checkpoints").iterdir())[-1] / "drope.yaml"
    assert "type: nope" in saved.read_text()
    bad = tmp / "bad.yaml"
    bad.write_text(run_yaml.read_text().replace("init_positional: nope", "init_positional: alibi"))
    expect_error(run_cli("drope-train", bad, check=False), "bad.yaml", "init_positional", "rope or nope")
    bad.write_text(run_yaml.read_text().replace("init_positional: nope", "init_positional: yes"))
    expect_error(run_cli("drope-train", bad, check=False), "bad.yaml", "init_positional")
