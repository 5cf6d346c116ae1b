"""Tokenizer parity with HF `tokenizers`: byte-level BPEs trained on the fly (GPT-2, Qwen2 and SmolLM
style), saved as tokenizer.json; `drope-data encode/decode` must give exactly HF's ids and text."""
import json
import pathlib
import random

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from conftest import expect_error, run_cli

LICENSES = pathlib.Path("/usr/share/common-licenses")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                 r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

MULTILINGUAL = [
    "naïve café résumé — Ångström, Æsir, façade, Größe, smörgåsbord, coöperate",
    "東京都の天気は晴れです。日本語のテキストと中文文本，还有한국어 텍스트。",
    "Ελληνικά κείμενα, русский текст, עברית, العربية, हिन्दी",
    "emoji 🚀🔥✨ family 👩‍👩‍👧‍👦 flag 🇫🇷 hearts ❤️💙",
]


def corpus_text():
    files = sorted(p for p in LICENSES.iterdir() if p.is_file()) if LICENSES.is_dir() else []
    parts = [p.read_text(encoding="utf-8", errors="replace")[:20000] for p in files[:10]]
    return parts + MULTILINGUAL * 20


def eval_texts():
    rng = random.Random(0)
    pool = ("abcXYZ019 \t\n\r.,;'’\"-_()[]{}<>/\\|!?@#$%^&*+=~`éèüößñçÆØÅ東京中文한국어🚀🔥👩‍👧✨"
            "\u0301\u0300\u00a0\u2009\u3000\u200b\u2028\u0085\x00\x01\x1f\x7f\u0080\u00ad\u00ff٣½²Ⅻ")
    randoms = ["".join(rng.choice(pool) for _ in range(rng.randint(5, 80))) for _ in range(30)]
    license = corpus_text()[0][:3000] if LICENSES.is_dir() else ""
    return [
        "Hello, world! The quick brown fox jumps over the lazy dog.",
        *MULTILINGUAL,
        "e\u0301 (e + combining acute) vs é; A\u030a vs Å; \ufb01 ligature; \uff21 fullwidth",
        "   leading spaces, trailing   \t\ttabs\t \n\n\nnewlines\r\nCRLF\n  \n",
        "digits 0123456789 3.14159 1,000,000 ٣٤٥ ½ ² Ⅻ 2024-01-01T12:00:00Z",
        "raw bytes \x00\x01\x1f\x7f \u0080\u0085\u00a0\u00ad\u00ff and \u200b zero-width \u2028 separator",
        "it's they're we've I'm you'll he'd IT'S THEY'RE",
        "<|endoftext|>special<|im_start|>user\nhi<|im_end|>  [SEP]  x<tool>y <|endoftext|>",
        "a <|tool call|> b cafe\u0301 café[SEP]\t\n[SEP]",
        "def f(x):\n    return x ** 2  # comment\n\tif x:\n\t\tpass\n",
        "",
        " ",
        "\n",
        license,
        *randoms,
    ]


def train_bpe(pre_tokenizer, *, normalizer=None, added=(), vocab_size=900):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_text(), trainer=trainer)
    if added:
        tok.add_tokens(list(added))
    return tok


def save(tok_or_json, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    text = tok_or_json.to_str() if isinstance(tok_or_json, Tokenizer) else json.dumps(tok_or_json)
    path.write_text(text, encoding="utf-8")
    return path


def ours_encode(tok_path, texts, tmp):
    f = tmp / "texts.json"
    f.write_text(json.dumps(texts), encoding="utf-8")
    return json.loads(run_cli("drope-data", "encode", "--tokenizer", tok_path, "--texts", f).stdout)


def ours_decode(tok_path, ids, tmp, skip_special=False):
    f = tmp / "ids.json"
    f.write_text(json.dumps(ids))
    args = ["--skip-special"] if skip_special else []
    return json.loads(run_cli("drope-data", "decode", "--tokenizer", tok_path, "--ids", f, *args).stdout)


def check_parity(hf, tok_path, tmp, texts=None):
    """Encode and decode: our ids and text must equal HF's exactly."""
    texts = eval_texts() if texts is None else texts
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    got = ours_encode(tok_path, texts, tmp)
    for t, w, g in zip(texts, want, got):
        assert g == w, f"encode mismatch for {t!r}"
    rng = random.Random(1)
    vocab = hf.get_vocab_size()
    # Decoding: the encodings, random id runs (split UTF-8 sequences → U+FFFD) and specials.
    seqs = [w for w in want if w] + [[rng.randrange(vocab) for _ in range(rng.randint(1, 40))] for _ in range(40)]
    seqs += [[hf.token_to_id(s), 300, hf.token_to_id(s)] for s in SPECIALS]
    for skip in (False, True):
        expect = [hf.decode(s, skip_special_tokens=skip) for s in seqs]
        assert ours_decode(tok_path, seqs, tmp, skip) == expect
    return want


def test_gpt2_style_byte_level(tmp):
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False))
    path = save(hf, tmp / "gpt2" / "tokenizer.json")
    want = check_parity(hf, path, tmp)
    assert sum(len(w) for w in want) < sum(len(t.encode()) for t in eval_texts()) * 0.8, "merges barely used"

    # Merges in the older "a b" string form give the same ids.
    j = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(j["model"]["merges"][0], list)
    j["model"]["merges"] = [f"{a} {b}" for a, b in j["model"]["merges"]]
    legacy = save(j, tmp / "legacy" / "tokenizer.json")
    assert ours_encode(legacy, eval_texts(), tmp) == want

    # ignore_merges: whole words found in the vocabulary are taken as they are.
    j["model"]["ignore_merges"] = True
    im = save(j, tmp / "ignore" / "tokenizer.json")
    check_parity(Tokenizer.from_file(str(im)), im, tmp)


def test_gpt2_style_with_prefix_space(tmp):
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=True), vocab_size=600)
    check_parity(hf, save(hf, tmp / "tokenizer.json"), tmp)


def test_qwen2_style_split_regex_nfc_and_added_tokens(tmp):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    # Added tokens with characters outside the byte table (space) or inside it (é) decode differently.
    added = [AddedToken("<tool>", special=False, normalized=True),
             AddedToken("[SEP]", special=True, lstrip=True, rstrip=True, normalized=False),
             AddedToken("<|tool call|>", special=False, normalized=False),
             AddedToken("café", special=False, normalized=True)]
    hf = train_bpe(pre, normalizer=normalizers.NFC(), added=added)
    path = save(hf, tmp / "qwen" / "tokenizer.json")
    check_parity(hf, path, tmp)
    ids = ours_encode(path, ["a<|im_end|>b"], tmp)[0]
    assert hf.token_to_id("<|im_end|>") in ids


def test_smollm_style_digits_then_byte_level(tmp):
    pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    hf = train_bpe(pre, vocab_size=700)
    check_parity(hf, save(hf, tmp / "tokenizer.json"), tmp)


def test_split_behaviors_and_invert(tmp):
    """Every Split behaviour, plain and inverted, on a shared vocabulary (pre-tokenizer swapped in the JSON)."""
    base = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=500)
    texts = eval_texts()[:16]
    for behavior in ["removed", "isolated", "merged_with_previous", "merged_with_next", "contiguous"]:
        for invert in (False, True):
            pre = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(r"\s|\p{N}|[.,]"), behavior=behavior, invert=invert),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ])
            hf = Tokenizer.from_str(base.to_str())
            hf.pre_tokenizer = pre
            path = save(hf, tmp / f"{behavior}-{invert}" / "tokenizer.json")
            want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
            assert ours_encode(path, texts, tmp) == want, (behavior, invert)


def test_single_text_file_and_errors(tmp):
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=400)
    path = save(hf, tmp / "tok" / "tokenizer.json")
    text = "Größe 東京 🚀\n  x"
    (tmp / "t.txt").write_text(text, encoding="utf-8")
    out = json.loads(run_cli("drope-data", "encode", "--tokenizer", tmp / "tok", "--text", tmp / "t.txt").stdout)
    assert out == hf.encode(text).ids

    (tmp / "bad.txt").write_bytes(b"ok \xff no")
    r = run_cli("drope-data", "encode", "--tokenizer", path, "--text", tmp / "bad.txt", check=False)
    assert r.returncode == 1 and "bad.txt" in r.stderr and "UTF-8" in r.stderr

    j = json.loads(path.read_text(encoding="utf-8"))
    j["model"]["merges"][3] = ["zz-not-a-token", "x"]
    bad = save(j, tmp / "bad" / "tokenizer.json")
    r = run_cli("drope-data", "encode", "--tokenizer", bad, "--text", tmp / "t.txt", check=False)
    assert r.returncode == 1 and str(bad) in r.stderr and "model.merges[3]" in r.stderr
    assert r.stderr.count("\n") == 1

    (tmp / "ids.json").write_text(json.dumps([1, 2, hf.get_vocab_size() + 5]))
    r = run_cli("drope-data", "decode", "--tokenizer", path, "--ids", tmp / "ids.json", check=False)
    assert r.returncode == 1 and "index 2" in r.stderr


def test_prepare_cli(tmp):
    docs = tmp / "docs"
    docs.mkdir()
    for i in range(6):
        (docs / f"d{i}.txt").write_text(f"document {i}: naïve café 東京 🚀 " * 20, encoding="utf-8")
    (tmp / "x.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n{"txt": "c"}\n', encoding="utf-8")
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=400)
    save(hf, tmp / "tok" / "tokenizer.json")
    out = tmp / "data"
    r = run_cli("drope-data", "prepare", "--input", docs, "--tokenizer", tmp / "tok", "--out", out,
                "--val-fraction", "0.2", "--shard-tokens", "100")
    assert "train: 5 documents" in r.stdout and "val:   1 documents" in r.stdout
    index = json.loads((out / "index.json").read_text())
    assert index["dtype"] == "uint16" and index["tokenizer"]["eos_id"] == hf.token_to_id("<|endoftext|>")
    assert len(index["splits"]["train"]["shards"]) > 1 and (out / "tokenizer.json").is_file()

    r = run_cli("drope-data", "prepare", "--input", docs, "--input", tmp / "x.jsonl", "--tokenizer", tmp / "tok",
                "--out", tmp / "data2", check=False)
    assert r.returncode == 1 and "x.jsonl:3" in r.stderr and not (tmp / "data2").exists()
    r = run_cli("drope-data", "prepare", "--input", docs, "--train-tokenizer", "--out", tmp / "data3", check=False)
    assert r.returncode == 1 and "--vocab-size" in r.stderr


def added(token_id, content, special=True):
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": not special, "special": special}


def added_token_cases(j):
    """(name, added_tokens to append, index of the token HF numbers otherwise) for a trained tokenizer.json `j`:
    every way an added token's id can disagree with the numbering HF tokenizers gives it."""
    vocab = j["model"]["vocab"]
    n = max([*vocab.values(), *(a["id"] for a in j["added_tokens"])]) + 1  # HF's next id
    some_vocab_id = sorted(vocab.values())[len(vocab) // 2]
    some_token = next(t for t, i in vocab.items() if i == some_vocab_id + 1)
    base = len(j["added_tokens"])
    return [
        ("collides with a vocabulary entry", [added(some_vocab_id, "<tool>")], base),
        ("two tokens share an id", [added(n, "<a>"), added(n, "<b>")], base + 1),
        ("a gap", [added(n + 3, "<a>")], base),
        ("reordered", [added(n + 1, "<a>"), added(n, "<b>")], base),
        ("vocabulary content at another id", [added(n, some_token, special=False)], base),
        ("the same content twice", [added(n, "<a>"), added(n + 1, "<a>")], base + 1),
    ]


def test_added_token_ids_are_hf_tokenizers_or_refused(tmp):
    """HF tokenizers ignores an added token's id and numbers the list itself; drope takes a file whose ids are that
    numbering (parity) and refuses any other, naming the token, its id and HF's, instead of giving other ids."""
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=600)
    j = json.loads(hf.to_str())
    n = max([*j["model"]["vocab"].values(), *(a["id"] for a in j["added_tokens"])]) + 1
    good = dict(j, added_tokens=[*j["added_tokens"], added(n, "<a>"), added(n + 1, "<b>", special=False)])
    path = save(good, tmp / "good" / "tokenizer.json")
    reloaded = Tokenizer.from_file(str(path))
    assert (reloaded.token_to_id("<a>"), reloaded.token_to_id("<b>")) == (n, n + 1)
    check_parity(reloaded, path, tmp, texts=["x<a>y <b> z", "<a><b>the"])
    cases = added_token_cases(j)
    assert len(cases) == 6
    for k, (name, extra, index) in enumerate(cases):
        doc = dict(j, added_tokens=[*j["added_tokens"], *extra])
        path = save(doc, tmp / f"bad{k}" / "tokenizer.json")
        token = doc["added_tokens"][index]
        hf_id = Tokenizer.from_file(str(path)).token_to_id(token["content"])
        assert hf_id != token["id"], f"{name}: HF keeps id {hf_id}; the case does not test a disagreement"
        texts = tmp / "t.json"
        texts.write_text(json.dumps(["x"]))
        r = run_cli("drope-data", "encode", "--tokenizer", path, "--texts", texts, check=False)
        expect_error(r, path, f"added_tokens[{index}]", f'"{token["content"]}" has id {token["id"]}',
                     f"HF tokenizers gives it id {hf_id}")
        assert len(r.stderr.strip().splitlines()) == 1 and not r.stdout, (name, r.stderr)
