"""The paper's DroPE configs at 360M-7B: the public recipe's hyper-parameters, the models'
public shapes (configs/hf/*/config.json against transformers), and shard modes that the memory plan says each
config needs on 8 x 80 GB; docs/gpu-cluster.md shows the plan table that bench/paper_plans.py prints.
"""
import json

import pytest
import yaml
from paper_plans import GPU_GB, HEADROOM, MODES, PAPER, WORLD, plan, table

from conftest import BIN, ROOT, run_cli

# config -> (qk_norm, seq_len, batch, steps, lr, schedule type, warmup): SakanaAI/DroPE cfgs/run_cfg/*.yaml over
# trainer_cfg/base_trainer.yaml (SmolLM-360M: the paper's Table 5 instead, as configs/train/smollm-360m-drope.yaml).
RECIPE = {
    "llama2-7b-drope": ("none", 4096, 512, 5000, 1e-4, "cosine", 100),
    "llama2-7b-drope-qknorm": ("qk", 4096, 512, 15000, 3e-4, "cosine", 100),
    "smollm-1.7b-drope": ("none", 2048, 512, 120000, 3e-4, "wsd", 600),
    "smollm-1.7b-drope-qknorm": ("qk", 2048, 512, 120000, 3e-4, "wsd", 600),
    "smollm2-1.7b-drope": ("none", 8192, 512, 120000, 3e-4, "constant", 0),
    "smollm2-1.7b-drope-qknorm": ("qk", 8192, 512, 120000, 3e-4, "constant", 0),
}
# Published parameter counts (model cards / the paper): Llama-2-7B 6.74B, SmolLM(2)-1.7B 1.71B, SmolLM-360M 362M.
PARAMS = {"Llama-2-7b-hf": 6.738e9, "SmolLM-1.7B": 1.711e9, "SmolLM2-1.7B": 1.711e9, "SmolLM-360M": 3.619e8}


def resolved(name):
    return yaml.safe_load(run_cli("drope-train", ROOT / "configs" / "train" / f"{name}.yaml", "--print-config").stdout)


@pytest.mark.parametrize("name", sorted(RECIPE))
def test_recipe_hyperparameters(name):
    c = resolved(name)
    qk, seq, batch, steps, lr, sched, warmup = RECIPE[name]
    assert (c["run"]["phase"], c["drope"]["qk_norm"]) == ("drope", qk)
    assert (c["data"]["seq_len"], c["data"]["batch_size"], c["train"]["steps"]) == (seq, batch, steps)
    assert (c["optim"]["lr"], c["schedule"]["type"], c["schedule"]["warmup"]) == (lr, sched, warmup)
    assert (c["optim"]["betas"], float(c["optim"]["eps"]), c["optim"]["weight_decay"]) == ([0.9, 0.999], 1e-8, 0.0)
    assert (c["train"]["clip"], c["train"]["dtype"], c["train"]["device"]) == (1.0, "bfloat16", "cuda")
    if sched == "wsd":  # 600 warmup, 96 000 stable, 23 400 cosine decay to 0.1 x lr
        assert (c["schedule"]["decay_shape"], c["schedule"]["min_lr_ratio"]) == ("cosine", 0.1)
        assert round(c["schedule"]["decay_fraction"] * steps) == 23400
    if sched == "cosine":  # transformers' cosine schedule decays to 0
        assert c["schedule"]["min_lr_ratio"] == 0.0
    assert c["run"]["init"] == f"hf/{PAPER[name]}"


@pytest.mark.parametrize("hf", sorted(PARAMS))
def test_hf_shapes_match_transformers(hf, tmp):
    """The parameters our plan counts from configs/hf/<model>/config.json (fp32 weights = 4 bytes each) are
    the ones transformers builds from it (on the meta device: no memory), and the published count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**json.loads((ROOT / "configs" / "hf" / hf / "config.json").read_text()))
    with torch.device("meta"):
        n = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())
    assert n == pytest.approx(PARAMS[hf], rel=2e-3)
    run = tmp / "plan.yaml"
    run.write_text(f"run: {{name: p, out_dir: {tmp / 'out'}, init: {ROOT / 'configs' / 'hf' / hf}}}\n"
                   "data: {dataset: none, seq_len: 64, batch_size: 1}\n")
    plans = [json.loads(l) for l in run_cli("drope-train", run, "--plan", "--json").stdout.splitlines()]
    assert [p["params"] for p in plans if p["shard"] == "none"] == [4 * n]


@pytest.mark.parametrize("name", list(PAPER))
def test_shard_mode_is_what_the_plan_needs(name):
    """The configured mode fits 8 x 80 GB with the headroom at the configured micro-batch, every less sharded
    mode does not (the choice is the cheapest that fits), and the micro-batch is at most the largest that fits."""
    _, text, modes = plan(BIN, name)
    c = yaml.safe_load(text)
    budget = HEADROOM * GPU_GB * 1e9
    chosen = c["train"]["shard"]
    assert modes[chosen]["total"] <= budget, (name, chosen, modes[chosen]["total"])
    for m in MODES[:MODES.index(chosen)]:
        assert modes[m]["total"] > budget, (name, m, "fits: the config shards more than it needs")
    assert c["data"]["micro_batch"] <= modes[chosen]["largest_micro_batch"]
    assert c["data"]["batch_size"] % (WORLD * c["data"]["micro_batch"]) == 0


def test_the_cluster_page_shows_the_plan_table():
    page = (ROOT / "docs" / "gpu-cluster.md").read_text()
    t = table(BIN)
    assert t in page, "docs/gpu-cluster.md's memory-plan table is stale: paste the output of bench/paper_plans.py\n" + t
