"""Model directories: integer and boolean weights are refused naming the tensor (never converted to float), and a
config.json beside drope.yaml that disagrees with it is refused naming the key (drope.yaml is the one read)."""
import json
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import expect_error, expect_model_dir_error, run_cli

TENSOR = "model.layers.0.mlp.up_proj.weight"


@pytest.fixture
def model(tmp):
    d = tmp / "m"
    run_cli("drope-model", "init", "--preset", "micro", "--out", d)
    assert (d / "config.json").exists() and (d / "drope.yaml").exists()
    run_cli("drope-model", "info", "--model", d)
    return d


@pytest.mark.parametrize("dtype,name", [(np.int32, "I32"), (np.int64, "I64"), (np.uint8, "U8"), (np.bool_, "BOOL")])
@pytest.mark.parametrize("layout", ["drope", "hf"])
def test_non_float_weights_are_refused_naming_the_tensor(model, tmp, dtype, name, layout):
    if layout == "hf":
        (model / "drope.yaml").unlink()
    w = load_file(str(model / "model.safetensors"))
    w[TENSOR] = (w[TENSOR] != 0).astype(dtype)
    save_file(w, str(model / "model.safetensors"), metadata={"format": "pt"})
    expect_model_dir_error(model, tmp, "model.safetensors", TENSOR, name, "floating point")


def test_half_precision_weights_still_load(model):
    w = load_file(str(model / "model.safetensors"))
    save_file({k: v.astype(np.float16) for k, v in w.items()}, str(model / "model.safetensors"))
    run_cli("drope-model", "info", "--model", model)


@pytest.mark.parametrize("key,value,yaml_key", [
    ("rope_theta", 500000.0, "model.positional.rope_theta"),
    ("rms_norm_eps", 1e-3, "model.rms_eps"),
    ("num_hidden_layers", 3, "model.num_layers"),
    ("tie_word_embeddings", False, "model.tie_embeddings"),
    ("max_position_embeddings", 4096, "model.max_position"),
    ("model_type", "qwen2", "model.arch"),
    ("eos_token_id", 5, "model.eos_token_id"),
])
def test_a_config_json_that_disagrees_with_drope_yaml_is_refused(model, tmp, key, value, yaml_key):
    p = model / "config.json"
    c = json.loads(p.read_text())
    c[key] = value
    if key == "rope_theta":
        c["rope_parameters"]["rope_theta"] = value
    p.write_text(json.dumps(c))
    expect_model_dir_error(model, tmp, "config.json", f"'{key}'", "drope.yaml", yaml_key, "disagree")


def test_a_drope_yaml_edited_alone_is_refused(model, tmp):
    p = model / "drope.yaml"
    p.write_text(p.read_text().replace("rope_theta: 10000", "rope_theta: 20000"))
    assert "20000" in p.read_text()
    expect_model_dir_error(model, tmp, "config.json", "'rope_theta'", "10000", "20000")


def test_a_rope_config_json_beside_a_nope_drope_yaml_is_refused(model, tmp):
    nope = tmp / "nope"
    run_cli("drope-model", "drop", "--model", model, "--out", nope)
    assert not (nope / "config.json").exists()
    shutil.copy(model / "config.json", nope / "config.json")
    expect_model_dir_error(nope, tmp, "config.json", "model.positional, layer 0", "nope", "rope")


@pytest.mark.parametrize("key", ["bos_token_id", "eos_token_id"])
@pytest.mark.parametrize("as_list", [False, True])
def test_an_out_of_vocabulary_special_token_id_is_refused(model, tmp, key, as_list):
    """A bos/eos id the config.json sets beyond the embedding would index past it in transformers; it is refused
    naming the file, the key and the range rather than dropped. null still means none."""
    (model / "drope.yaml").unlink()
    p = model / "config.json"
    c = json.loads(p.read_text())
    vocab = c["vocab_size"]
    p.write_text(json.dumps(dict(c, **{key: None})))
    run_cli("drope-model", "info", "--model", model)
    p.write_text(json.dumps(dict(c, **{key: [vocab] if as_list else vocab})))
    expect_model_dir_error(model, tmp, "config.json", f"'{key}'", f"[0, {vocab})")


@pytest.mark.parametrize("layout", ["drope", "hf"])
def test_a_tied_model_with_a_different_stored_head_is_refused(model, tmp, layout):
    """A tied model's head is its embedding. A stored lm_head.weight that is a copy of it (as some exporters write)
    loads; a different one would be silently ignored, so it is refused naming the tensor and the config."""
    if layout == "hf":
        (model / "drope.yaml").unlink()
    w = load_file(str(model / "model.safetensors"))
    embed = w["model.embed_tokens.weight"]
    save_file(dict(w, **{"lm_head.weight": embed.copy()}), str(model / "model.safetensors"))
    run_cli("drope-model", "info", "--model", model)
    head = embed.copy()
    head[3, 5] += 0.25
    save_file(dict(w, **{"lm_head.weight": head}), str(model / "model.safetensors"))
    config = "drope.yaml" if layout == "drope" else "config.json"
    expect_model_dir_error(model, tmp, "model.safetensors", "'lm_head.weight'", "model.embed_tokens.weight", config,
                           "tie")
    save_file(dict(w, **{"lm_head.weight": embed[:-1].copy()}), str(model / "model.safetensors"))
    expect_model_dir_error(model, tmp, "model.safetensors", "'lm_head.weight'", "shape")


@pytest.mark.parametrize("tool", [("drope-model", "info"), ("drope-model", "drop", "--out", "{tmp}/d")])
def test_a_model_path_that_is_a_symlink_loop_is_one_line_naming_it(tmp, tool):
    loop = tmp / "loop"
    loop.symlink_to(loop)
    r = run_cli(*(a.format(tmp=tmp) for a in tool), "--model", loop, check=False)
    assert r.returncode != 0
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and str(loop) in lines[0] and "Too many levels of symbolic links" in lines[0], r.stderr
    assert "filesystem error" not in r.stderr and not (tmp / "d").exists()


def test_a_shard_tensor_the_index_does_not_list_is_refused(model, tmp):
    """A sharded checkpoint whose shard holds a tensor its index does not list: transformers would report that
    tensor missing (and initialise it afresh) while the shard's copy would be used here. The index and its shards
    disagree, so the directory is refused naming the index, the tensor and the shard; a consistent one loads."""
    w = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()
    keys = sorted(w)
    shards = {"a.safetensors": keys[::2], "b.safetensors": keys[1::2]}
    weight_map = {k: f for f, ks in shards.items() for k in ks}
    for f, ks in shards.items():
        save_file({k: w[k] for k in ks}, str(model / f), metadata={"format": "pt"})
    index = model / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    run_cli("drope-model", "info", "--model", model)
    unlisted = TENSOR if weight_map[TENSOR] == "b.safetensors" else keys[1]
    del weight_map[unlisted]
    index.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    expect_model_dir_error(model, tmp, "model.safetensors.index.json", f"'{unlisted}'", "b.safetensors",
                           "not in the weight_map")
    out = tmp / "converted"
    expect_error(run_cli("drope-model", "convert", "--model", model, "--out", out, check=False), f"'{unlisted}'")
    assert not out.exists()
