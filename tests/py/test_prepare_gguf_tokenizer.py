"""`drope-data prepare --tokenizer F.gguf` writes the GGUF's tokenizer into the dataset as real files (tokenizer.json
or tokenizer.model, with tokenizer_config.json), loads them back and checks they encode like the source before it
reports success; the dataset then trains. A byte-for-byte copy of the GGUF used to land as tokenizer.json."""
import json
import os
import subprocess

import numpy as np
import pytest
from test_gguf import SMOLLM2, bpe_meta, bpe_tokenizer, tiny_model, to_gguf, write_gguf

from conftest import BIN, expect_error, run_cli

WORDS = ["alpha", "beta", "gamma", "delta", "naïve", "café", "東京", "42", "  two spaces", "x\ty", "The quick fox"]


def corpus(tmp, n=300):
    rng = np.random.default_rng(0)
    path = tmp / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(rng.choice(WORDS, 16))}) + "\n" for _ in range(n)))
    return path


def encode(tokenizer, tmp, texts):
    f = tmp / "texts.json"
    f.write_text(json.dumps(texts))
    return json.loads(run_cli("drope-data", "encode", "--tokenizer", tokenizer, "--texts", f).stdout)


def train_one_step(tmp, dataset):
    vocab = json.loads((dataset / "index.json").read_text())["tokenizer"]["vocab_size"]
    cfg = tmp / "train.yaml"
    cfg.write_text(f"""run: {{name: t, out_dir: {tmp / 'run'}, seed: 0}}
model: {{preset: micro, vocab_size: {vocab}, max_position: 32}}
data: {{dataset: {dataset}, seq_len: 32, batch_size: 2}}
optim: {{lr: 1.0e-3}}
schedule: {{type: constant, warmup: 0}}
train: {{steps: 1, log_every: 1, eval_every: 0, eval_batches: 1, keep_last: 1}}
""")
    r = subprocess.run([str(BIN / "drope-train"), str(cfg), "--quiet"], capture_output=True, text=True, timeout=240,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in (tmp / "run" / "log.jsonl").read_text().splitlines() if line.strip()]
    assert any(row.get("step") == 1 and np.isfinite(row["loss"]) for row in rows), rows


def test_prepare_with_a_bpe_gguf_tokenizer(tmp):
    tok = bpe_tokenizer()
    path = tmp / "m.gguf"
    to_gguf(tiny_model("llama", True), path, "llama", tokenizer_meta=bpe_meta(tok))
    ds = tmp / "ds"
    run_cli("drope-data", "prepare", "--input", corpus(tmp), "--tokenizer", path, "--out", ds)
    json.loads((ds / "tokenizer.json").read_text())  # real JSON, not the GGUF's bytes
    cfg = json.loads((ds / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|endoftext|>"
    texts = ["alpha beta  gamma", "naïve café 東京 42", "The quick fox\tjumps"]
    want = [tok.encode(t).ids for t in texts]  # HF tokenizers on the tokenizer the GGUF was written from
    assert encode(ds, tmp, texts) == want == encode(path, tmp, texts)
    index = json.loads((ds / "index.json").read_text())
    assert index["tokenizer"]["file"] == "tokenizer.json" and index["tokenizer"]["kind"] == "hf-bpe"
    train_one_step(tmp, ds)


def test_prepare_with_a_sentencepiece_gguf_tokenizer(tmp):
    from transformers.utils import sentencepiece_model_pb2_new as pb2
    text = corpus(tmp)
    run_cli("drope-data", "prepare", "--input", text, "--train-tokenizer", "--vocab-size", "300", "--out", tmp / "sp")
    proto = pb2.ModelProto()
    proto.ParseFromString((tmp / "sp" / "tokenizer.model").read_bytes())
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
    ds = tmp / "ds"
    run_cli("drope-data", "prepare", "--input", text, "--tokenizer", path, "--out", ds)
    assert (ds / "tokenizer.model").read_bytes()[:1] != b"G"
    texts = ["alpha beta gamma", "  two spaces\tand a tab", "naïve café 東京 42"]
    assert encode(ds, tmp, texts) == encode(tmp / "sp" / "tokenizer.model", tmp, texts)
    # the same token stream as the dataset prepared with the original .model
    for split in ("train", "val"):
        a = sorted(p.name for p in (ds / split).iterdir())
        assert a and all((ds / split / n).read_bytes() == (tmp / "sp" / split / n).read_bytes() for n in a
                         if n.endswith(".bin"))
    train_one_step(tmp, ds)


@pytest.mark.skipif(not SMOLLM2.exists(), reason="SmolLM2 GGUF not fetched (scripts/fetch_smollm2.sh)")
def test_prepare_with_the_real_smollm2_gguf(tmp):
    """The command of gpu-check's real-model stage, on a small corpus."""
    ds = tmp / "d"
    run_cli("drope-data", "prepare", "--input", "/usr/share/common-licenses/GPL-3", "--paragraphs", "--tokenizer",
            SMOLLM2, "--out", ds)
    texts = ["Hello, world!", "  the GNU General Public License\tv3"]
    assert encode(ds, tmp, texts) == encode(SMOLLM2, tmp, texts)


def test_a_gguf_without_a_tokenizer_is_refused_before_any_output(tmp):
    path = tmp / "none.gguf"
    to_gguf(tiny_model("llama", True), path, "llama")
    r = run_cli("drope-data", "prepare", "--input", corpus(tmp, 20), "--tokenizer", path, "--out", tmp / "ds",
                check=False)
    expect_error(r, "tokenizer.ggml.model")
    assert not (tmp / "ds").exists()
