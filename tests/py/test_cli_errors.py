"""Bad input at the CLI edge: every case exits non-zero with one clear line naming the file/key, never
crashes, and leaves no output file behind."""
import json
import os
import pathlib
import struct
import subprocess

import numpy as np
import pytest

from conftest import BIN, expect_error, run_cli


@pytest.fixture
def model_dir(tmp):
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m")
    return tmp / "m"


def logits(model, tokens, out):
    return run_cli("drope-eval", "logits", "--model", model, "--tokens", tokens, "--out", out, check=False)


def test_logits_token_file_errors(tmp, model_dir):
    out = tmp / "out.safetensors"
    cases = {
        "missing.json": (None, ["missing.json", "not found"]),
        "malformed.json": ("[[1, 2, 3]", ["malformed.json", "invalid JSON"]),
        "ragged.json": (json.dumps([[1, 2, 3], [4, 5]]), ["ragged.json", "entry 1 has 2 tokens"]),
        "vocab.json": (json.dumps([[1, 2, 999]]), ["vocab.json", "token id 999", "[0, 256)"]),
        "negative.json": (json.dumps([[1, -2]]), ["negative.json", "token id -2"]),
        "float.json": (json.dumps([[1, 2.5]]), ["float.json", "position 1", "integer"]),
        "empty.json": ("[]", ["empty.json", "non-empty"]),
        "object.json": ('{"tokens": [1]}', ["object.json", "list"]),
    }
    for name, (text, needles) in cases.items():
        if text is not None:
            (tmp / name).write_text(text)
        expect_error(logits(model_dir, tmp / name, out), *needles)
        assert not out.exists()
    assert not list(tmp.glob("out.safetensors*"))


def test_model_dir_errors(tmp, model_dir):
    toks = tmp / "t.json"
    toks.write_text(json.dumps([[1, 2, 3]]))
    out = tmp / "out.safetensors"
    expect_error(logits(tmp / "nowhere", toks, out), "nowhere", "not found")
    # Truncated safetensors.
    data = (model_dir / "model.safetensors").read_bytes()
    (model_dir / "model.safetensors").write_bytes(data[:100])
    expect_error(logits(model_dir, toks, out), "model.safetensors", "truncated")
    # Header length pointing past the end.
    (model_dir / "model.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    expect_error(logits(model_dir, toks, out), "model.safetensors", "header claims")
    # Missing tensor and wrong shape, written with the real safetensors package.
    from safetensors.numpy import save_file

    good = {f"model.layers.{i}.self_attn.q_proj.weight": np.zeros((64, 64), np.float32) for i in range(2)}
    save_file(good, str(model_dir / "model.safetensors"))
    expect_error(logits(model_dir, toks, out), "missing tensor", "model.embed_tokens.weight")
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m2")
    from safetensors.numpy import load_file

    w = load_file(str(tmp / "m2" / "model.safetensors"))
    w["model.layers.1.mlp.down_proj.weight"] = np.zeros((64, 100), np.float32)
    save_file(w, str(tmp / "m2" / "model.safetensors"))
    expect_error(logits(tmp / "m2", toks, out), "model.layers.1.mlp.down_proj.weight", "[64, 100]", "[64, 128]")
    (tmp / "m2" / "drope.yaml").write_text("arch: llama\nhidden_sise: 3\n")
    expect_error(logits(tmp / "m2", toks, out), "drope.yaml:2", "hidden_sise", "unknown key")
    (tmp / "m2" / "drope.yaml").unlink()
    (tmp / "m2" / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    expect_error(logits(tmp / "m2", toks, out), "config.json", "invalid JSON")
    assert not out.exists()


def test_config_errors(tmp):
    cases = {
        "unknown.yaml": ("model:\n  preset: tiny\n  num_layer: 3\n",
                         ["unknown.yaml:3", "model.num_layer", "num_layers"]),
        "type.yaml": ("model:\n  preset: tiny\n  tie_embeddings: maybe\n",
                      ["type.yaml:3", "tie_embeddings", "true or false"]),
        "malformed.yaml": ("model:\n  preset: tiny\n   bad: [\n", ["malformed.yaml", "malformed YAML"]),
        "preset.yaml": ("model:\n  preset: huge\n", ["preset.yaml:2", "unknown model preset 'huge'"]),
        "scaling.yaml": ("model:\n  preset: tiny\n  positional:\n    scaling: {type: longrope}\n",
                         ["scaling.yaml:4", "positional.scaling.type", "longrope"]),
    }
    for name, (text, needles) in cases.items():
        (tmp / name).write_text(text)
        expect_error(run_cli("drope-model", "init", "--config", tmp / name, "--out", tmp / "o", check=False), *needles)
        assert not (tmp / "o").exists()


def test_usage_errors(tmp):
    r = run_cli("drope-eval", "logits", "--model", tmp, check=False)
    assert r.returncode != 0 and "--tokens" in r.stderr + r.stdout
    r = run_cli("drope-model", "drop", "--model", tmp, "--out", tmp / "x", "--qk-norm", "both", check=False)
    assert r.returncode != 0 and "qk-norm" in r.stderr + r.stdout
    expect_error(run_cli("drope-analyze", "rope-scaling", "--type", "yarn", "--factor", "0.5", check=False), "--factor")


def one_clear_line(r, *needles):
    """expect_error, and the first line of stderr already says what is wrong (CLI11 adds a --help hint)."""
    expect_error(r, *needles)
    first = r.stderr.strip().splitlines()[0]
    for n in needles:
        assert str(n) in first, f"'{n}' not on the first line:\n{r.stderr}"


def test_non_finite_and_overflowing_flags_are_refused(tmp, model_dir):
    text = tmp / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    ppl = ("drope-eval", "ppl", "--model", model_dir, "--data", text, "--lengths", "32", "--out", tmp / "r")
    cases = [
        # --factor inf used to run and print ppl = nan with exit 0.
        (ppl + ("--rope-scaling", "yarn", "--factor", "inf"), ["--factor", "finite", "inf"]),
        (ppl + ("--rope-scaling", "pi", "--factor", "nan"), ["--factor", "finite", "nan"]),
        (ppl + ("--rope-scaling", "pi", "--factor", "1e999"), ["--factor", "out of range"]),
        # strtoll clamps: this used to reach the checks as INT64_MIN.
        (ppl + ("--train-length", "-99999999999999999999"), ["--train-length", "out of range"]),
        # Beyond any model.max_position: blamed on the flag, not on the model's config.
        (ppl + ("--train-length", "1000000000000"), ["--train-length", "2^30", "1000000000000"]),
        (("drope-analyze", "rope-scaling", "--type", "yarn", "--factor", "2,inf", "--out", tmp / "a"),
         ["--factor", "finite"]),
        (("drope-analyze", "rope-scaling", "--theta", "inf"), ["--theta", "finite"]),
        # A negative number wrapped into an unsigned seed.
        (("drope-model", "init", "--preset", "micro", "--seed", "-1", "--out", tmp / "o"), ["--seed", "non-negative"]),
        (("drope-data", "prepare", "-i", text, "--out", tmp / "d", "--val-fraction", "nan"),
         ["--val-fraction", "finite"]),
    ]
    for args, needles in cases:
        one_clear_line(run_cli(*args, check=False), *needles)
    assert not (tmp / "r.json").exists() and not (tmp / "o").exists() and not (tmp / "d").exists()


def test_hostile_yaml_is_refused_with_file_and_line(tmp):
    cases = {
        "dupkey.yaml": (b"model:\n  preset: micro\n  num_layers: 2\n  num_layers: 8\n",
                        ["dupkey.yaml:4", "duplicate key 'num_layers'", "line 3"]),
        "dupsection.yaml": (b"model:\n  preset: micro\nmodel:\n  preset: tiny\n",
                            ["dupsection.yaml:3", "duplicate key 'model'"]),
        "twodocs.yaml": (b"model:\n  preset: micro\n---\nmodel:\n  preset: tiny\n",
                         ["twodocs.yaml:4", "second YAML document"]),
        "latin1.yaml": (b"model:\n  preset: micro\n  arch: llam\xe1\n", ["latin1.yaml:3", "not valid UTF-8"]),
        "null.yaml": (b"model:\n  preset: micro\n  rms_eps:\n", ["null.yaml:3", "rms_eps", "got null"]),
        "theta.yaml": (b"model:\n  preset: micro\n  positional: {rope_theta: .inf}\n",
                       ["theta.yaml", "rope_theta", "finite"]),
        "factor.yaml": (b"model:\n  preset: micro\n  positional: {scaling: {type: yarn, factor: .nan}}\n",
                        ["factor.yaml", "scaling.factor", "finite"]),
        "overflow.yaml": (b"model:\n  preset: micro\n  vocab_size: 99999999999999999999\n",
                          ["overflow.yaml:3", "vocab_size", "out of range"]),
        "deep.yaml": (b"model:\n  preset: micro\n  x: " + b"[" * 200 + b"]" * 200 + b"\n",
                      ["deep.yaml", "nested more than 128"]),
    }
    for name, (text, needles) in cases.items():
        (tmp / name).write_bytes(text)
        one_clear_line(run_cli("drope-model", "init", "--config", tmp / name, "--out", tmp / "o", check=False),
                       *needles)
        assert not (tmp / "o").exists()


def test_run_config_numbers_are_checked(tmp):
    cfg = pathlib.Path(__file__).resolve().parents[2] / "configs" / "train" / "tiny-pretrain-rope.yaml"
    run_cli("drope-train", cfg, "--print-config")
    for override, needles in {
        "optim.lr=.inf": ["optim.lr", "finite"],
        "optim.eps=.nan": ["optim.eps", "finite"],
        "optim.weight_decay=-.inf": ["optim.weight_decay"],
        "optim.betas=[0.9, .nan]": ["optim.betas", "finite"],
        "train.clip=.inf": ["train.clip", "finite"],
        "optim.lr=1e999": ["optim.lr", "out of range"],
        "train.steps=99999999999999999999": ["train.steps", "out of range"],
    }.items():
        one_clear_line(run_cli("drope-train", cfg, "--print-config", "--set", override, check=False), *needles)


def test_fifos_are_refused_not_waited_on(tmp, model_dir):
    text = tmp / "text.txt"
    text.write_text("hello")
    fifo, tok = tmp / "config.yaml", tmp / "tokenizer.json"
    os.mkfifo(fifo)
    os.mkfifo(tok)
    for args, path in ((("drope-model", "info", "--config", fifo), fifo),
                       (("drope-data", "encode", "--tokenizer", tok, "--text", text), tok)):
        try:
            r = subprocess.run([str(BIN / args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{args[0]} blocked on a FIFO")
        one_clear_line(r, str(path), "FIFO")
    st = model_dir / "model.safetensors"
    st.rename(tmp / "weights")
    os.mkfifo(st)
    try:
        r = subprocess.run([str(BIN / "drope-model"), "info", "--model", str(model_dir)], capture_output=True,
                           text=True,
                           timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("drope-model blocked on a FIFO model.safetensors")
    one_clear_line(r, "model.safetensors", "FIFO")


def test_deep_json_and_bad_safetensors_layout(tmp, model_dir):
    toks = tmp / "t.json"
    toks.write_text(json.dumps([[1, 2, 3]]))
    out = tmp / "out.safetensors"
    deep = "[" * 100000 + "]" * 100000
    # Trailing bytes after the last tensor: another reader could find weights there.
    st = model_dir / "model.safetensors"
    good = st.read_bytes()
    st.write_bytes(good + b"\0" * 16)
    one_clear_line(logits(model_dir, toks, out), "model.safetensors", "16 trailing bytes")
    st.write_bytes(good)
    # Token lists, config.json (rope_scaling) and JSONL lines nested 100000 deep: refused, not a stack overflow.
    (tmp / "deep.json").write_text(deep)
    one_clear_line(logits(model_dir, tmp / "deep.json", out), "deep.json", "nesting limit")
    (model_dir / "drope.yaml").unlink()
    (model_dir / "config.json").write_text('{"model_type": "llama", "rope_scaling": ' + deep + "}")
    one_clear_line(logits(model_dir, toks, out), "config.json", "nesting limit")
    (tmp / "deep.jsonl").write_text('{"text": "fine"}\n{"text": ' + deep + "}\n")
    # JSON Lines documents go through the shared JSONL reader (drope-data, drope-eval data, LongBench files).
    r = run_cli("drope-data", "prepare", "--input", tmp / "deep.jsonl", "--train-tokenizer", "--vocab-size", "64",
                "--out", tmp / "p", check=False)
    one_clear_line(r, "deep.jsonl:2", "nesting limit")
    assert not (tmp / "p").exists()
    assert not out.exists()


def test_size_flags_are_bounded_before_anything_is_allocated(tmp, model_dir):
    text = tmp / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. " * 40)
    layers = ("drope-bench", "layers", "--repeats", "1")
    cases = [
        (layers + ("--ffn", "1000000000"), ["--ffn", "expected an integer in [1, 4194304]"]),
        (layers + ("--heads", "8", "--kv-heads", "9"), ["--kv-heads", "[1, 8]"]),
        (layers + ("--threads", "-2"), ["--threads", "[0, 4096]"]),
        (layers + ("--head-dim", "33"), ["--head-dim", "even"]),
        # Each flag within its bound, the product not: an estimate refuses it before allocating.
        (layers + ("--batch", "1000000", "--seq", "4000000"), ["drope-bench layers", "needs about", "GiB"]),
        (("drope-bench", "generate", "--model", model_dir, "--threads", "-1"), ["--threads", "[0, 4096]"]),
        (("drope-bench", "step-parts", "--rows", "0"), ["--rows", "expected an integer in [1, 4194304]"]),
        (("drope-bench", "step-parts", "--preset", "nope"), ["--preset", "nope"]),
        (("drope-bench", "step-parts", "--rows", "4000000"), ["drope-bench step-parts", "needs about"]),
        (("drope-bench", "generate", "--model", model_dir, "--context", "99999999999"), ["--context"]),
        (("drope-eval", "offset-key", "--model", model_dir, "--lengths", "64", "--queries", "1000000000000"),
         ["--queries", "expected an integer in [1, 1048576]"]),
        (("drope-eval", "fit-temperature", "--model", model_dir, "--task", "offset-key", "--lengths", "64",
          "--queries", "99999999"), ["--queries", "1048576"]),
        # multiplier x training length beyond any length (1e300 used to overflow the conversion).
        (("drope-eval", "ppl", "--model", model_dir, "--data", text, "--multipliers", "1e300", "--out", tmp / "r"),
         ["--multipliers", "1e+300", "more than"]),
        (("drope-analyze", "constant-seq", "--preset", "micro", "--seq-len", "99999999"),
         ["--seq-len", "[2, 4194304]"]),
        (("drope-analyze", "constant-seq", "--preset", "micro", "--seq-len", "1000000"),
         ["constant-seq", "needs about"]),
        (("drope-analyze", "bias-grad", "--preset", "micro", "--seq-len", "4000000", "--out", tmp / "bg"),
         ["bias-grad", "needs about"]),
        (("drope-analyze", "rope-scaling", "--head-dim", "100000000000"), ["--head-dim", "65536"]),
    ]
    for args, needles in cases:
        one_clear_line(run_cli(*args, check=False), *needles)
    assert not (tmp / "r.json").exists() and not (tmp / "bg").exists()


def test_huge_prompts_are_refused_before_tokenising(tmp, model_dir):
    """A prompt is tokenised whole (LongBench truncates its tokens in the middle): one above 64 MiB is refused
    naming its file and line, before the model is loaded or any of it is tokenised."""
    big = "word " * ((64 << 20) // 5 + 2)
    prompts = tmp / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "short"}) + "\n" + json.dumps({"prompt": big}) + "\n")
    r = run_cli("drope-eval", "generate", "--model", model_dir, "--prompts", prompts, "--out", tmp / "gen.jsonl",
                check=False)
    expect_error(r, f"{prompts}:2: the prompt is", "bytes, more than the 64 MiB")
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp / "gen.jsonl").exists(), r.stderr
    data = tmp / "lb"
    data.mkdir()
    sample = {"input": "Who?", "context": big, "answers": ["Ann"], "all_classes": None, "length": 9}
    (data / "hotpotqa.jsonl").write_text(json.dumps(dict(sample, context="Ann wrote it.")) + "\n" + json.dumps(sample)
                                         + "\n")
    r = run_cli("drope-eval", "longbench", "--model", model_dir, "--data", data, "--tasks", "hotpotqa", "--out",
                tmp / "lb-res", check=False)
    expect_error(r, f"{data / 'hotpotqa.jsonl'}:2: the prompt is", "more than the 64 MiB")
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp.glob("lb-res*")), r.stderr


def test_numbers_and_flags_that_used_to_pass(tmp, model_dir):
    # --plan --json with the largest sizes a run config accepts: an overflowing plan is refused, not negative.
    cfg = tmp / "plan.yaml"
    cfg.write_text("run: {name: p, out_dir: %s}\nmodel: {preset: micro}\n"
                   "data: {text: /usr/share/common-licenses/GPL-3, seq_len: 16777216, batch_size: 16777216}\n"
                   "train: {steps: 1}\n" % (tmp / "p"))
    r = run_cli("drope-train", cfg, "--plan", "--json", check=False)
    one_clear_line(r, "memory plan", "2^59", "data.seq_len 16777216")
    assert r.stdout == ""  # no plan, and so no negative byte count
    # An empty --log-level is a value, and not one of the levels.
    one_clear_line(run_cli("drope-model", "info", "--preset", "micro", "--log-level", "", check=False),
                   "--log-level", "got ''")
    # Token ids: -1 is "none", anything more negative is refused naming the key.
    (tmp / "bos.yaml").write_text("model:\n  preset: micro\n  bos_token_id: -5\n")
    one_clear_line(run_cli("drope-model", "info", "--config", tmp / "bos.yaml", check=False), "model.bos_token_id",
                   "-1 (none)", "-5")
    (tmp / "none.yaml").write_text("model:\n  preset: micro\n  bos_token_id: -1\n")
    run_cli("drope-model", "info", "--config", tmp / "none.yaml")
    # Llama-3 RoPE scaling needs every one of its keys, as transformers does.
    run_cli("drope-model", "convert", "--model", model_dir, "--out", tmp / "hf")
    config = json.loads((tmp / "hf" / "config.json").read_text())
    full = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16}
    (tmp / "hf" / "drope.yaml").unlink()
    for key in ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor"):
        rp = {k: v for k, v in full.items() if k != key}
        (tmp / "hf" / "config.json").write_text(json.dumps(dict(config, rope_scaling=rp, rope_parameters=None)))
        one_clear_line(run_cli("drope-model", "info", "--model", tmp / "hf", check=False), "config.json", "llama3",
                       key)
    (tmp / "hf" / "config.json").write_text(json.dumps(dict(config, rope_scaling=full, rope_parameters=None)))
    run_cli("drope-model", "info", "--model", tmp / "hf")
    # Dropping again with another QK-norm says why and what to do instead.
    run_cli("drope-model", "drop", "--model", model_dir, "--qk-norm", "qk", "--out", tmp / "d1")
    one_clear_line(run_cli("drope-model", "drop", "--model", tmp / "d1", "--qk-norm", "q", "--out", tmp / "d2",
                           check=False), "already has QK-norm qk", "QK-norm q", "QK-norm none")
    assert not (tmp / "d2").exists()
    run_cli("drope-model", "drop", "--model", tmp / "d1", "--out", tmp / "d3")  # keeps the model's QK-norm


@pytest.mark.parametrize("value", ["1", "-3"])
def test_longbench_max_length_too_small_is_named(tmp, model_dir, value):
    """The middle truncation keeps max_length / 2 tokens of each end: --max-length 1 keeps nothing and is refused
    naming the flag (it used to end as "prompt 0 is empty" after the model was loaded)."""
    data = tmp / "lb"
    data.mkdir()
    sample = {"input": "Who?", "context": "Ann wrote it.", "answers": ["Ann"], "all_classes": None, "length": 3}
    (data / "hotpotqa.jsonl").write_text(json.dumps(sample) + "\n")
    r = run_cli("drope-eval", "longbench", "--model", model_dir, "--data", data, "--tasks", "hotpotqa",
                f"--max-length={value}", "--out", tmp / "lb-res", check=False)
    expect_error(r, "--max-length must be 0", "or at least 2", f"got {value}")
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp.glob("lb-res*")), r.stderr


@pytest.mark.parametrize("template, needles", [
    ("[INST][/INST]", ["--chat-format '[INST][/INST]'", "has no {prompt} field"]),
    ("<s>{bad}", ["--chat-format", "'{bad}'", "the one field is {prompt}"]),
])
def test_longbench_chat_format_needs_its_prompt_field(tmp, model_dir, template, needles):
    """A chat template without {prompt} would replace every chat task's prompt by the template alone; it is
    refused naming the flag before the model is loaded."""
    data = tmp / "lb"
    data.mkdir()
    sample = {"input": "Who?", "context": "Ann wrote it.", "answers": ["Ann"], "all_classes": None, "length": 3}
    (data / "narrativeqa.jsonl").write_text(json.dumps(sample) + "\n")
    r = run_cli("drope-eval", "longbench", "--model", model_dir, "--data", data, "--tasks", "narrativeqa",
                "--chat-format", template, "--out", tmp / "lb-res", check=False)
    expect_error(r, *needles)
    assert len(r.stderr.strip().splitlines()) == 1 and not list(tmp.glob("lb-res*")), r.stderr


def test_analyze_lists_are_refused_when_repeated(tmp):
    r = run_cli("drope-analyze", "rope-scaling", "--type", "yarn", "--factor", "2,4,2", check=False)
    expect_error(r, "--factor: 2 is listed twice")
