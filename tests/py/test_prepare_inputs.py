"""`drope-data prepare` on the corpus formats people have: JSON Lines compressed with gzip / zstd and parquet
(fixtures written here by Python's gzip, the `zstandard` package and pyarrow; nothing binary is committed),
whole directories of them, on 1, 2 or 3 threads. The token shards must hold exactly HF tokenizers' ids of
every document plus EOS, in the documented order, and be bitwise identical whatever the thread count; bad
files fail naming the file and the line / row group, with no output left behind."""
import gzip
import json
import pathlib
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from test_tokenizer_parity import MULTILINGUAL, save, train_bpe
from tokenizers import pre_tokenizers

from conftest import expect_error, run_cli

LICENSES = pathlib.Path("/usr/share/common-licenses")


def documents():
    """About 400 real paragraphs (licenses) and multilingual lines, in a fixed order."""
    docs = []
    for p in sorted(LICENSES.iterdir()) if LICENSES.is_dir() else []:
        if p.is_file():
            docs += [d.strip() for d in p.read_text(encoding="utf-8", errors="replace").split("\n\n") if d.strip()]
    docs = docs[:360] + MULTILINGUAL * 10 + ["tab\tand  spaces\n\nnew paragraph — café 🚀"]
    assert len(docs) > 100
    return docs


def jsonl(docs, field="content"):
    return "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode()


def write_corpus(root, docs):
    """Splits `docs` over the formats (in the sorted order prepare reads them): a two-member .jsonl.gz, a
    two-frame .jsonl.zst, a parquet file with several row groups (plus a null and a blank row, skipped) and a
    large_string parquet file in a subdirectory. Returns the documents in reading order."""
    root.mkdir(parents=True)
    q = len(docs) // 4
    a, b, c, d = docs[:q], docs[q:2 * q], docs[2 * q:3 * q], docs[3 * q:]
    half = len(a) // 2
    (root / "00.jsonl.gz").write_bytes(gzip.compress(jsonl(a[:half])) + gzip.compress(jsonl(a[half:])))
    cz = zstandard.ZstdCompressor(level=3)
    half = len(b) // 2
    (root / "01.jsonl.zst").write_bytes(cz.compress(jsonl(b[:half])) + cz.compress(jsonl(b[half:])))
    rows = c[:5] + [None, "   \n"] + c[5:]
    table = pa.table({"id": pa.array(range(len(rows)), pa.int64()), "content": pa.array(rows, pa.string())})
    pq.write_table(table, root / "02.parquet", row_group_size=17, compression="zstd", write_page_checksum=True)
    (root / "sub").mkdir()
    pq.write_table(pa.table({"content": pa.array(d, pa.large_string())}), root / "sub" / "03.parquet",
                   row_group_size=50)
    (root / ".hidden.jsonl").write_text("not json\n")  # hidden entries are skipped
    assert pq.ParquetFile(root / "02.parquet").num_row_groups > 3
    return a + b + c + d


def read_split(ds, split):
    """The concatenated tokens of a split's shards (shards.h: 32-byte header, then the tokens)."""
    index = json.loads((ds / "index.json").read_text())
    out = []
    for sh in index["splits"][split]["shards"]:
        raw = (ds / sh["file"]).read_bytes()
        assert raw[:8] == b"DRPTOK01"
        width = int.from_bytes(raw[16:20], "little")
        count = int.from_bytes(raw[24:32], "little")
        body = raw[32:]
        assert len(body) == count * width
        out += [int.from_bytes(body[i:i + width], "little") for i in range(0, len(body), width)]
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prep")
    hf = train_bpe(pre_tokenizers.ByteLevel(add_prefix_space=False), vocab_size=600)
    tok = save(hf, tmp / "tok" / "tokenizer.json")
    docs = write_corpus(tmp / "corpus", documents())
    return {"tmp": tmp, "hf": hf, "tok": tok, "docs": docs, "corpus": tmp / "corpus"}


def prepare(s, out, *extra, inputs=None, column="content", check=True):
    args = ["drope-data", "prepare", "--tokenizer", s["tok"], "--out", out, "--text-column", column, *extra]
    for i in inputs or [s["corpus"]]:
        args += ["--input", i]
    return run_cli(*args, check=check)


def test_every_format_gives_hf_ids(setup):
    s = setup
    out = s["tmp"] / "all"
    r = prepare(s, out, "--val-fraction", "0", "--threads", "2")
    assert f"train: {len(s['docs'])} documents" in r.stdout
    eos = s["hf"].token_to_id("<|endoftext|>")
    want = []
    for d in s["docs"]:
        want += s["hf"].encode(d, add_special_tokens=False).ids + [eos]
    assert read_split(out, "train") == want
    assert json.loads((out / "index.json").read_text())["meta"]["text_field"] == "content"


def test_long_lines_and_no_final_newline(setup):
    """Documents longer than the readers' 256 KiB buffers, a last line without '\\n', CRLF line ends."""
    s = setup
    big = "\n\n".join(s["docs"][:200]) * 10
    assert len(big.encode()) > 600_000
    docs = [big, "short one", big[:300_000] + " tail"]
    body = (json.dumps({"content": docs[0]}) + "\r\n" + json.dumps({"content": docs[1]}) + "\n\n" +
            json.dumps({"content": docs[2]})).encode()
    d = s["tmp"] / "long"
    d.mkdir()
    (d / "a.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(body))
    (d / "b.jsonl.gz").write_bytes(gzip.compress(body))
    prepare(s, s["tmp"] / "long-ds", "--val-fraction", "0", "--threads", "2", inputs=[d])
    eos = s["hf"].token_to_id("<|endoftext|>")
    want = []
    for doc in docs * 2:
        want += s["hf"].encode(doc, add_special_tokens=False).ids + [eos]
    assert read_split(s["tmp"] / "long-ds", "train") == want


@pytest.mark.parametrize("kind", ["dictionary", "string_view", "large_string"])
def test_parquet_string_encodings(setup, kind):
    """Dictionary-encoded, string_view and large_string text columns read like plain strings."""
    s = setup
    docs = s["docs"][:40] * 2  # repeats, so that a dictionary has something to share
    arr = pa.array(docs)
    arr = {"dictionary": arr.dictionary_encode(), "string_view": arr.cast(pa.string_view()),
           "large_string": arr.cast(pa.large_string())}[kind]
    f = s["tmp"] / f"enc-{kind}.parquet"
    pq.write_table(pa.table({"content": arr}), f, row_group_size=30)
    assert str(pq.read_schema(f).field("content").type).startswith(kind)
    out = s["tmp"] / f"enc-{kind}"
    prepare(s, out, "--val-fraction", "0", "--threads", "2", inputs=[f])
    eos = s["hf"].token_to_id("<|endoftext|>")
    want = []
    for d in docs:
        want += s["hf"].encode(d, add_special_tokens=False).ids + [eos]
    assert read_split(out, "train") == want


def test_shards_identical_for_1_2_3_threads(setup):
    s = setup
    outs = []
    for threads in (1, 2, 3):
        out = s["tmp"] / f"t{threads}"
        prepare(s, out, "--val-fraction", "0.1", "--seed", "7", "--shard-tokens", "4000", "--threads", str(threads))
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert len([f for f in files if f.suffix == ".bin"]) > 3, files
    for other in outs[1:]:
        assert sorted(p.relative_to(other) for p in other.rglob("*") if p.is_file()) == files
        for f in files:
            assert (other / f).read_bytes() == (outs[0] / f).read_bytes(), f"{other / f} differs"
    # The same documents as one plain .jsonl give the same shards.
    plain = s["tmp"] / "plain.jsonl"
    plain.write_bytes(jsonl(s["docs"]))
    prepare(s, s["tmp"] / "plain", "--val-fraction", "0.1", "--seed", "7", "--shard-tokens", "4000", "--threads", "3",
            inputs=[plain])
    for split in ("train", "val"):
        assert read_split(s["tmp"] / "plain", split) == read_split(outs[0], split)


def test_sentencepiece_shards_identical_for_1_and_3_threads(setup):
    """The SentencePiece path (a model trained on the corpus, encoded through its module) on 1 and 3 threads."""
    s = setup
    outs = []
    for threads in (1, 3):
        out = s["tmp"] / f"sp{threads}"
        run_cli("drope-data", "prepare", "--input", s["corpus"], "--text-column", "content", "--train-tokenizer",
                "--vocab-size", "800", "--out", out, "--shard-tokens", "3000", "--threads", str(threads))
        outs.append(out)
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert len([f for f in files if f.suffix == ".bin"]) > 3, files
    for f in files:
        assert (outs[1] / f).read_bytes() == (outs[0] / f).read_bytes(), f


def test_progress_on_stderr_only_when_asked(setup):
    s = setup
    r = prepare(s, s["tmp"] / "p1", "--threads", "2", "--progress")
    assert "scanning:" in r.stderr and f"{len(s['docs'])}/{len(s['docs'])} documents" in r.stderr
    assert "M tokens" in r.stderr and "MB/s" in r.stderr and "took" in r.stderr
    r = prepare(s, s["tmp"] / "p2", "--threads", "2")  # stderr is a pipe: no progress
    assert r.stderr == ""


def test_help_names_the_formats():
    out = run_cli("drope-data", "prepare", "--help").stdout
    for word in ("parquet", ".jsonl.gz", ".jsonl.zst", "--text-column", "--threads", "--progress"):
        assert word in out


def bad_utf8_parquet(path):
    """A string column whose row 1 is not UTF-8 (from_buffers skips pyarrow's validation)."""
    data = b"good" + b"ab\xff\xfecd"
    offsets = pa.py_buffer(bytes(memoryview(pa.array([0, 4, 10], pa.int32()).buffers()[1])))
    arr = pa.Array.from_buffers(pa.string(), 2, [None, offsets, pa.py_buffer(data)])
    pq.write_table(pa.table({"content": arr}), path)


def corrupt_row_group(path):
    """Flips bytes inside the data page of row group 1 (the file has page checksums)."""
    rows = [f"row {i} " + "lorem ipsum dolor " * 20 for i in range(60)]
    pq.write_table(pa.table({"content": rows}), path, row_group_size=20, compression="none",
                   write_page_checksum=True)
    col = pq.ParquetFile(path).metadata.row_group(1).column(0)
    raw = bytearray(path.read_bytes())
    start = col.dictionary_page_offset or col.data_page_offset
    mid = start + col.total_compressed_size // 2
    raw[mid:mid + 8] = b"\x00" * 8
    path.write_bytes(bytes(raw))


def test_bad_files_are_named(setup):
    s = setup
    tmp = s["tmp"] / "bad"
    tmp.mkdir()
    body = jsonl([f"document {i} " * 30 for i in range(200)])
    gz = gzip.compress(body)
    zs = zstandard.ZstdCompressor().compress(body)
    cases = []

    def case(name, data, *needles):
        p = tmp / name
        if callable(data):
            data(p)
        else:
            p.write_bytes(data)
        cases.append((p, needles))

    corrupt = bytearray(gz)
    corrupt[len(gz) // 2:len(gz) // 2 + 16] = b"\xff" * 16
    case("corrupt.jsonl.gz", bytes(corrupt), "corrupt.jsonl.gz:", "corrupt gzip data")
    # A truncated stream is reported in the line it ends in: one more than the lines Python's decoders get.
    cut = gz[:len(gz) * 2 // 3]
    line = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(cut).count(b"\n") + 1
    assert 1 < line < 200
    case("truncated.jsonl.gz", cut, f"truncated.jsonl.gz:{line}: truncated gzip data")
    case("plain.jsonl.gz", body, "plain.jsonl.gz:1", "corrupt gzip data")
    cut = zs[:len(zs) * 2 // 3]
    line = zstandard.ZstdDecompressor().decompressobj().decompress(cut).count(b"\n") + 1
    case("truncated.jsonl.zst", cut, f"truncated.jsonl.zst:{line}: truncated zstd data")
    case("garbage.jsonl.zst", b"\x28\xb5\x2f\xfd" + b"\x00garbage" * 10, "garbage.jsonl.zst:1", "corrupt zstd data")
    lines = body.split(b"\n")
    lines[2] = b'{"content": "bad \xff\xfe byte"}'
    case("badutf8.jsonl.gz", gzip.compress(b"\n".join(lines)), "badutf8.jsonl.gz:3")
    case("notext.txt.gz", gzip.compress(b"hello"), "notext.txt.gz", "JSON Lines only")
    case("nocol.parquet", lambda p: pq.write_table(pa.table({"text": ["a"], "url": ["u"]}), p),
         "nocol.parquet", 'no column "content"', "columns: text, url")
    case("intcol.parquet", lambda p: pq.write_table(pa.table({"content": pa.array([1, 2], pa.int64())}), p),
         "intcol.parquet", 'column "content" holds int64')
    case("bincol.parquet", lambda p: pq.write_table(pa.table({"content": pa.array([b"a"], pa.binary())}), p),
         "bincol.parquet", "holds binary")
    case("badutf8.parquet", bad_utf8_parquet, "badutf8.parquet: row group 0, row 1", "not valid UTF-8")
    case("rowgroup.parquet", corrupt_row_group, "rowgroup.parquet: row group 1:", "CRC checksum")
    good = (s["corpus"] / "sub" / "03.parquet").read_bytes()
    case("truncated.parquet", good[:len(good) // 2], "truncated.parquet", "not a readable parquet file")

    for path, needles in cases:
        out = tmp / f"out-{path.name}"
        r = prepare(s, out, "--threads", "2", inputs=[s["corpus"] / "00.jsonl.gz", path], check=False)
        expect_error(r, *needles)
        assert r.stderr.count("\n") == 1, r.stderr
        assert not out.exists(), path.name


def test_bad_flags(setup):
    s = setup
    r = prepare(s, s["tmp"] / "f1", "--threads", "0", check=False)
    expect_error(r, "--threads", "[1, 1024]")
    r = prepare(s, s["tmp"] / "f2", column="body", check=False)
    expect_error(r, "00.jsonl.gz:1", 'missing field "body"')
    assert not (s["tmp"] / "f1").exists() and not (s["tmp"] / "f2").exists()
