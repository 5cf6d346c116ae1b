"""The corpus builder's Python parts (scripts/drope_scripts/corpus.py, corpus_text.py) on small fixtures."""
import gzip
import json
import os
import struct
import subprocess
import zlib

import pytest

from drope_scripts import corpus, corpus_text


def test_lock_file():
    pkgs = corpus.read_lock(corpus.LOCK.read_text())
    assert [p.name for p in pkgs if "small" in p.sets] == ["r-cran-janeaustenr"]
    assert len([p for p in pkgs if "full" in p.sets]) == 5
    fortunes = next(p for p in pkgs if p.name == "fortunes")
    assert fortunes.deb_name == "fortunes_1%3a1.99.1-7.3_all.deb" and len(fortunes.sha256) == 64
    with pytest.raises(corpus.CorpusError, match=r"corpus.lock:2: expected 'name version sha256 sets'"):
        corpus.read_lock("# comment\nname 1.0 abc\n")


def test_input_stamp_matches_the_shell_form(tmp_path):
    """The stamp of the extracted text: the same hash the shell script wrote (existing corpora stay valid)."""
    lock = "# header\nr-cran-janeaustenr  1.0.0-1  abc  small,full\n\njargon-text 4 def full\n"
    (tmp_path / "lock").write_text(lock)
    shell = subprocess.run(["bash", "-c", "{ echo 'set=small local=0'; grep -v '^#' lock; } | sha256sum"],
                           cwd=tmp_path, capture_output=True, text=True, check=True).stdout.split()[0]
    assert corpus.input_stamp("small", False, lock) == shell
    assert corpus.input_stamp("small", False, "# other comment\n" + lock) == shell
    assert corpus.input_stamp("full", False, lock) != shell != corpus.input_stamp("small", True, lock)


def test_dataset_ready(tmp_path):
    docs, ds = tmp_path / "docs.jsonl", tmp_path / "ds"
    docs.write_text("")
    assert not corpus.dataset_ready(ds, docs, 2048)
    ds.mkdir()
    (ds / "index.json").write_text(json.dumps({"tokenizer": {"kind": "sentencepiece", "vocab_size": 2048}}))
    os.utime(docs, (1000, 1000))
    assert corpus.dataset_ready(ds, docs, 2048)
    assert not corpus.dataset_ready(ds, docs, 4096)
    os.utime(docs, None)
    os.utime(ds / "index.json", (1000, 1000))
    assert not corpus.dataset_ready(ds, docs, 2048)  # older than the documents


def test_arguments(capsys):
    assert corpus.main(["--bogus"]) == 2
    assert "unknown argument '--bogus' (use --small or --full)" in capsys.readouterr().err
    assert corpus.main(["--help"]) == 0
    assert "bash scripts/make_corpus.sh --small" in capsys.readouterr().out


def test_missing_binary(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("DROPE_BUILD_DIR", str(tmp_path))
    assert corpus.main(["--small"]) == 1
    assert "drope-data not found: build first" in capsys.readouterr().err


def r_vector(lines):
    """An XDR R serialisation (version 2) of a character vector; None is NA."""
    out = b"X\n" + struct.pack(">iii", 2, 0x040300, 0x020300) + struct.pack(">ii", 16, len(lines))
    for s in lines:
        if s is None:
            out += struct.pack(">ii", 9, -1)
        else:
            b = s.encode()
            out += struct.pack(">ii", 0x40009, len(b)) + b
    return out


def rdb(*vectors):
    """An R lazy-load database: each object a 4-byte length and a zlib stream."""
    return b"".join(struct.pack(">i", 0) + zlib.compress(r_vector(v)) for v in vectors)


def test_r_strings():
    assert corpus_text.r_strings(r_vector(["a", None, "ÿ b"])) == ["a", "", "ÿ b"]
    assert list(corpus_text.r_lazyload_vectors(rdb(["x"], ["y", "z"]))) == [["x"], ["y", "z"]]
    with pytest.raises(ValueError, match="not an XDR"):
        corpus_text.r_strings(b"A\n")


def test_text_helpers():
    assert corpus_text.unwrap(["one", " two ", "", "", "three"]) == "one two\n\nthree"
    assert list(corpus_text.chunks(["aa", "bb", "cc"], 4)) == ["aa\n\nbb", "cc"]
    assert corpus_text.clean("\r\na\t \n\n\n\nb  \n") == "a\n\nb"
    pod = ("=head1 NAME\n\nperlfoo - B<bold> and C<< code >>\n\n=begin html\n\n<p>x</p>\n\n=end html\n\n"
           "E<lt>tagE<gt>\n\n=cut\n")
    assert corpus_text.pod_to_text(pod) == "NAME\n\nperlfoo - bold and code\n\n<tag>"
    info = ("\x1f\nFile: python.info, Node: Intro, Next: B\n\nSee *note Other: x.\n* Menu:\n\n* A::\n\nText\n"
            "\x1f\nFile: python.info, Node: Security<14>\n\nrepeated\n\x1f\nTag Table:\n")
    assert corpus_text.info_nodes(info) == ["Intro\n\n\nSee Other\n\n\nText\n"]  # menu and note markup gone
    assert corpus_text.format_stats({"b": (2, 3_000_000), "a": (1, 500_000)}).splitlines() == [
        "  a                     1 documents     0.50 MB", "  b                     2 documents     3.00 MB",
        "  total                 3 documents     3.50 MB"]


def test_extract_from_unpacked_packages(tmp_path):
    root, out = tmp_path / "root", tmp_path / "out"
    (out / "heldout").mkdir(parents=True)
    para = "It is a truth universally acknowledged, that a single man in possession of a good fortune"
    novel = ["PRIDE AND PREJUDICE", "", "Chapter 1", "", para, "must be in want of a wife.", "", para * 2, "",
             "CHAPTER II", "", "short"]
    data = root / "usr/lib/R/site-library/janeaustenr/data"
    data.mkdir(parents=True)
    (data / "Rdata.rdb").write_bytes(rdb(["", "PERSUASION", "", "Sir Walter Elliot,", "of Kellynch Hall."], novel))
    jargon = root / "usr/share/doc/jargon-text"
    jargon.mkdir(parents=True)
    with gzip.open(jargon / "jargon.txt.gz", "wt") as f:
        f.write(("hacker: n. A person who enjoys exploring the details of programmable systems.\n\n" * 4) + "index\n")
    stats = corpus_text.extract(str(root), str(out), local=False)
    docs = [json.loads(l) for l in (out / "docs.jsonl").read_text().splitlines()]
    assert [(d["source"], d["title"]) for d in docs] == [("janeaustenr", "Pride And Prejudice, Chapter 1"),
                                                        ("jargon-text", "Jargon File part 0")]
    assert docs[0]["text"] == f"{para} must be in want of a wife.\n\n{para * 2}"  # "short" chapter II: dropped
    assert (out / "heldout" / "persuasion.txt").read_text() == "PERSUASION\n\nSir Walter Elliot, of Kellynch Hall.\n"
    assert stats == {"janeaustenr": (1, len(docs[0]["text"])), "jargon-text": (1, len(docs[1]["text"]))}
