"""Every shipped config parses through the CLIs, so a broken config fails CI.

configs/train/*.yaml: `drope-train CONFIG --print-config` (the strict run-config parser: unknown keys,
wrong types, bad combinations; paths such as data.dataset and run.init are only checked when training
starts, so GPU-scale configs validate here without their data). The resolved config it prints must
parse again to the same text. configs/models/*.yaml: `drope-model info --config`.
"""
import pathlib

import pytest
import yaml

from conftest import expect_error, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRAIN = sorted((ROOT / "configs" / "train").glob("*.yaml"))
MODELS = sorted((ROOT / "configs" / "models").glob("*.yaml"))


def test_configs_exist():
    assert len(TRAIN) >= 4 and len(MODELS) >= 4


@pytest.mark.parametrize("cfg", TRAIN, ids=lambda p: p.name)
def test_train_config_parses(cfg, tmp):
    r = run_cli("drope-train", cfg, "--print-config")
    resolved = yaml.safe_load(r.stdout)
    assert resolved["run"]["out_dir"], cfg
    assert resolved["train"]["steps"] > 0
    # The printed config is itself a valid config that resolves to the same thing.
    again = tmp / "resolved.yaml"
    again.write_text(r.stdout)
    assert run_cli("drope-train", again, "--print-config").stdout == r.stdout


@pytest.mark.parametrize("cfg", MODELS, ids=lambda p: p.name)
def test_model_config_parses(cfg):
    r = run_cli("drope-model", "info", "--config", cfg)
    assert "parameters:" in r.stdout


def test_gpu_configs_match_paper_table5():
    """The paper-scale configs carry the paper's training hyper-parameters (docs/design.md#training)."""
    def load(name):
        return yaml.safe_load(run_cli("drope-train", ROOT / "configs" / "train" / name, "--print-config").stdout)

    for pe in ("rope", "nope", "alibi", "rnope-swa"):
        c = load(f"qwen2-0.5b-pretrain-{pe}.yaml")
        assert c["model"]["positional"]["type"] == pe
        assert (c["optim"]["lr"], c["schedule"]["warmup"]) == (3e-4, 520)
        assert (c["data"]["seq_len"], c["data"]["batch_size"]) == (1024, 1024)
        assert c["data"]["seq_len"] * c["data"]["batch_size"] * c["train"]["steps"] == pytest.approx(16.8e9, rel=0.01)
    d = load("qwen2-0.5b-drope.yaml")
    assert (d["run"]["phase"], d["drope"]["qk_norm"]) == ("drope", "qk")
    assert (d["optim"]["lr"], d["schedule"]["warmup"]) == (1e-3, 70)
    assert d["data"]["seq_len"] * d["data"]["batch_size"] * d["train"]["steps"] == pytest.approx(2.1e9, rel=0.01)
    s = load("smollm-360m-drope.yaml")
    assert (s["run"]["phase"], s["drope"]["qk_norm"]) == ("drope", "qk")
    assert (s["optim"]["lr"], s["schedule"]["warmup"]) == (1e-3, 490)
    assert (s["data"]["seq_len"], s["data"]["batch_size"]) == (2048, 512)


def test_broken_config_is_rejected(tmp):
    """The validation the tests above rely on is strict: a misspelt key fails with file and key."""
    bad = tmp / "bad.yaml"
    bad.write_text((ROOT / "configs" / "train" / "tiny-pretrain-rope.yaml").read_text().replace("  lr:", "  lrr:"))
    expect_error(run_cli("drope-train", bad, "--print-config", check=False), "lrr")


def test_quickstart_drope_has_the_same_budget_as_rope():
    """The quickstart's DroPE run starts from the RoPE run's checkpoint at step N − M and trains M steps, so
    both have N steps; that checkpoint must be one the pretraining run writes and keeps."""
    pre = yaml.safe_load((ROOT / "configs/train/quickstart-pretrain-rope.yaml").read_text())
    dro = yaml.safe_load((ROOT / "configs/train/quickstart-drope.yaml").read_text())
    n, m = pre["train"]["steps"], dro["train"]["steps"]
    every, keep = pre["train"]["checkpoint_every"], pre["train"]["keep_last"]
    assert 0 < m < n and (n - m) % every == 0, (n, m, every)
    assert (n - ((n - m) // every) * every) // every < keep, "the step N − M checkpoint would be pruned"
    assert dro["run"]["init"].endswith(f"step-{n - m:08d}"), dro["run"]["init"]
    assert dro["data"]["seq_len"] == pre["data"]["seq_len"] and dro["data"]["batch_size"] == pre["data"]["batch_size"]
