"""RoPE scaling frequencies (PI, NTK, dynamic NTK, YaRN, Llama-3) of `drope-analyze rope-scaling` equal
HF transformers' `modeling_rope_utils` for several head dims, bases and factors."""
import json

import numpy as np
import pytest
import torch
from transformers import LlamaConfig

from conftest import run_cli


def hf_rope(rope_type, params, head_dim=64, theta=1e4, max_pos=2048, seq_len=None):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = LlamaConfig(hidden_size=head_dim * 4, num_attention_heads=4, head_dim=head_dim,
                      max_position_embeddings=max_pos,
                      rope_scaling={"rope_type": rope_type, "rope_theta": theta, **params})
    if rope_type == "default":
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        return inv.numpy(), 1.0
    inv, af = ROPE_INIT_FUNCTIONS[rope_type](cfg, "cpu", seq_len=seq_len)
    return inv.numpy(), float(af)


def ours_rope(kind, factors, head_dim=64, theta=1e4, train_length=2048, seq_len=None):
    """All factors in one CLI call: {factor: (inv_freq, attention_factor, gamma)}."""
    args = ["drope-analyze", "rope-scaling", "--type", kind, "--factor", ",".join(map(str, factors)), "--theta", theta,
            "--head-dim", head_dim, "--train-length", train_length]
    if seq_len:
        args += ["--seq-len", seq_len]
    return {r["factor"]: (np.array(r["inv_freq"]), r["attention_factor"], np.array(r["gamma"]))
            for r in json.loads(run_cli(*args).stdout)}


FACTORS = [2.0, 3.0, 4.0, 8.0]


@pytest.mark.parametrize("d,theta,L0", [(64, 1e4, 2048), (128, 5e5, 4096), (32, 1e6, 1024)])
def test_rope_scaling_frequencies_match_transformers(d, theta, L0):
    pi = ours_rope("pi", FACTORS, d, theta, L0)
    dyn = ours_rope("dynamic-ntk", FACTORS, d, theta, L0, seq_len=3 * L0)
    yarn = ours_rope("yarn", FACTORS, d, theta, L0)
    llama3 = ours_rope("llama3", FACTORS, d, theta, L0)
    ntk = ours_rope("ntk", FACTORS, d, theta, L0)
    for factor in FACTORS:
        inv, _ = hf_rope("linear", {"factor": factor}, d, theta, L0)
        np.testing.assert_allclose(pi[factor][0], inv, rtol=2e-6)
        inv, _ = hf_rope("dynamic", {"factor": factor}, d, theta, L0, seq_len=3 * L0)
        np.testing.assert_allclose(dyn[factor][0], inv, rtol=2e-6)
        inv, af = hf_rope("yarn", {"factor": factor, "original_max_position_embeddings": L0}, d, theta, L0)
        np.testing.assert_allclose(yarn[factor][0], inv, rtol=2e-6)
        assert abs(yarn[factor][1] - af) < 1e-6
        inv, _ = hf_rope("llama3", {"factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                    "original_max_position_embeddings": L0}, d, theta, L0)
        np.testing.assert_allclose(llama3[factor][0], inv, rtol=2e-6)
        # NTK-aware = RoPE with base θ·s^(d/(d−2)); its γ_m equals s^(−2m/(d−2)).
        inv, _ = hf_rope("default", {}, d, theta * factor ** (d / (d - 2)), L0)
        np.testing.assert_allclose(ntk[factor][0], inv, rtol=2e-6)
        np.testing.assert_allclose(ntk[factor][2], factor ** (-2.0 * np.arange(d // 2) / (d - 2)), rtol=1e-12)
