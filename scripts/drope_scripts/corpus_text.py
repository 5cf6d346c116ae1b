"""Plain text from the unpacked Debian packages of scripts/corpus.lock, one JSON document per line.

Sources: Jane Austen (R lazy-load data of r-cran-janeaustenr; *Persuasion* held out), the Python 3.11
Texinfo manual, the Perl POD documentation, the Jargon File, fortune files; in local mode this machine's
/usr/share/common-licenses and /usr/share/doc instead. Markup is stripped crudely.
"""
from __future__ import annotations

import glob
import gzip
import json
import os
import re
import struct
import zlib
from collections.abc import Iterable, Iterator
from typing import TextIO

MIN_CHARS = 200  # shorter documents are headings or empty menus


def clean(text: str) -> str:
    """Unix newlines, no tabs, no trailing blanks, at most one empty line in a row, stripped."""
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    text = re.sub(r"[ \u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def unwrap(lines: Iterable[str]) -> str:
    """Hard-wrapped prose → one line per paragraph, blank line between paragraphs."""
    paras, cur = [], []
    for line in lines:
        if line.strip():
            cur.append(line.strip())
        elif cur:
            paras.append(" ".join(cur))
            cur = []
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)


def chunks(parts: Iterable[str], size: int) -> Iterator[str]:
    """Groups consecutive parts (joined by blank lines) into documents of about `size` characters."""
    cur, n = [], 0
    for p in parts:
        cur.append(p)
        n += len(p)
        if n >= size:
            yield "\n\n".join(cur)
            cur, n = [], 0
    if cur:
        yield "\n\n".join(cur)


class Writer:
    """Writes cleaned documents of at least MIN_CHARS to docs.jsonl; counts documents and characters per source."""

    def __init__(self, f: TextIO):
        self.f = f
        self.stats: dict[str, tuple[int, int]] = {}

    def emit(self, source: str, title: str, text: str) -> None:
        text = clean(text)
        if len(text) < MIN_CHARS:
            return
        self.f.write(json.dumps({"text": text, "source": source, "title": title}, ensure_ascii=False) + "\n")
        n, c = self.stats.get(source, (0, 0))
        self.stats[source] = (n + 1, c + len(text))


def r_strings(blob: bytes) -> list[str]:
    """The character vector of one XDR R serialisation ('X\\n' format, versions 2 and 3); NA → ''."""
    if blob[:2] != b"X\n":
        raise ValueError("not an XDR R serialisation")
    p = 2
    (ver,) = struct.unpack(">i", blob[p:p + 4])
    p += 12
    if ver == 3:
        (n,) = struct.unpack(">i", blob[p:p + 4])
        p += 4 + n
    (flags,) = struct.unpack(">i", blob[p:p + 4])
    p += 4
    if flags & 0xFF != 16:
        raise ValueError("expected a character vector")
    (n,) = struct.unpack(">i", blob[p:p + 4])
    p += 4
    lines = []
    for _ in range(n):
        _, length = struct.unpack(">ii", blob[p:p + 8])
        p += 8
        if length < 0:
            lines.append("")
            continue
        lines.append(blob[p:p + length].decode("utf-8", "replace"))
        p += length
    return lines


def r_lazyload_vectors(data: bytes) -> Iterator[list[str]]:
    """Every character vector of an R lazy-load database (.rdb: 4-byte length + zlib stream, repeated)."""
    i = 0
    while i < len(data):
        z = zlib.decompressobj()
        blob = z.decompress(data[i + 4:])
        i += 4 + len(data[i + 4:]) - len(z.unused_data)
        yield r_strings(blob)


def austen(root: str, w: Writer, heldout: str) -> None:
    """Jane Austen's novels one chapter per document; *Persuasion* to heldout/persuasion.txt."""
    for rdb in glob.glob(os.path.join(root, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")):
        with open(rdb, "rb") as f:
            data = f.read()
        for lines in r_lazyload_vectors(data):
            title = next(line for line in lines if line.strip()).strip().title()
            if title == "Persuasion":  # held out entirely
                with open(os.path.join(heldout, "persuasion.txt"), "w", encoding="utf-8") as f:
                    f.write(unwrap(lines) + "\n")
                continue
            chapter, name = [], title
            for line in lines + ["CHAPTER END"]:
                if re.match(r"^\s*(CHAPTER|Chapter)\s+[0-9IVXLC]+\.?\s*$", line) or line == "CHAPTER END":
                    w.emit("janeaustenr", name, unwrap(chapter))
                    chapter, name = [], f"{title}, {line.strip().title()}"
                else:
                    chapter.append(line)


def info_nodes(raw: str) -> list[str]:
    """The text nodes of a Texinfo manual (no tag table, indices, repeated sections, menus, cross-reference markup)."""
    parts = []
    for node in raw.split("\x1f"):
        head, _, body = node.lstrip("\n").partition("\n")
        m = re.search(r"Node: ([^,\n]+)", head)
        if not m or head.startswith("Tag Table") or re.search(r"<\d+>$", m.group(1)) or "Index" in m.group(1):
            continue  # tag table, indices, the repeated changelog sections (Security<14>, ...)
        body = re.sub(r"^\* Menu:.*?(?=\n\n[^*]|\Z)", "", body, flags=re.S | re.M)  # menus
        body = re.sub(r"\*[Nn]ote ([^:]+?)::", r"\1", body)
        body = re.sub(r"\*[Nn]ote ([^:]+?):[^.,;]*[.,;]", r"\1", body)
        body = re.sub(r"^[=*\-.]{4,}\s*$", "", body, flags=re.M)  # heading underlines
        body = re.sub(r"^\s*---------- Footnotes ----------\s*$", "", body, flags=re.M)
        parts.append(f"{m.group(1)}\n\n{body}")
    return parts


def python_docs(root: str, w: Writer) -> None:
    """The Python 3.11 Texinfo manual in documents of about 12,000 characters."""
    for info in glob.glob(os.path.join(root, "usr/share/info/python3.11.info*.gz")):
        with gzip.open(info, "rt", encoding="utf-8", errors="replace") as f:
            parts = info_nodes(f.read())
        for k, text in enumerate(chunks(parts, 12000)):
            w.emit("python3.11-doc", f"Python docs part {k}", text)


def pod_to_text(pod: str) -> str:
    """POD → text: commands dropped (heading and item text kept), =begin/=end blocks dropped, formatting codes
    removed."""
    out, keep = [], True
    for block in re.split(r"\n\s*\n", pod):
        b = block.strip("\n")
        if b.startswith("="):
            cmd, _, rest = b[1:].partition(" ")
            cmd = cmd.split("\n")[0]
            if cmd in ("begin", "for"):
                keep = cmd == "for"
                continue
            if cmd == "end":
                keep = True
                continue
            if cmd in ("cut", "pod", "over", "back", "encoding"):
                continue
            b = rest  # head1..4, item: keep their text
        if not keep or not b.strip():
            continue
        out.append(b)
    text = "\n\n".join(out)
    for _ in range(4):  # nested formatting codes, innermost first
        text = re.sub(r"[A-Z]<<+\s+(.*?)\s+>>+", r"\1", text, flags=re.S)
        text = re.sub(r"L<([^<>|]*)\|[^<>]*>", r"\1", text)
        text = re.sub(r"E<lt>", "<", text)
        text = re.sub(r"E<gt>", ">", text)
        text = re.sub(r"E<[^<>]*>", "", text)
        text = re.sub(r"[BCFISXZL]<([^<>]*)>", r"\1", text)
    return text


def perl_docs(root: str, w: Writer) -> None:
    """The Perl POD pages (not the generated indices and C API lists) in documents of about 20,000 characters."""
    for pod in sorted(glob.glob(os.path.join(root, "usr/share/perl/*/pod/*.pod"))):
        name = os.path.basename(pod)[:-4]
        if name in ("perltoc", "perluniprops", "perlapi", "perlintern"):
            continue
        with open(pod, encoding="utf-8", errors="replace") as f:
            text = pod_to_text(f.read())
        for k, part in enumerate(chunks(text.split("\n\n"), 20000)):
            w.emit("perl-doc", f"{name} part {k}", part)


def jargon(root: str, w: Writer) -> None:
    """The Jargon File's paragraphs (not the one-word glossary index) in documents of about 12,000 characters."""
    for jf in glob.glob(os.path.join(root, "usr/share/doc/jargon-text/jargon.txt.gz")):
        with gzip.open(jf, "rt", encoding="utf-8", errors="replace") as f:
            text = f.read()
        paras = [p for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 40]
        for k, part in enumerate(chunks([unwrap(p.split("\n")) for p in paras], 12000)):
            w.emit("jargon-text", f"Jargon File part {k}", part)


def fortunes(root: str, w: Writer) -> None:
    """Fortune cookies ('%'-separated), grouped per file into documents of about 12,000 characters."""
    for ff in sorted(glob.glob(os.path.join(root, "usr/share/games/fortunes/*"))):
        name = os.path.basename(ff)
        if "." in name or os.path.islink(ff) or name in ("art", "ascii-art"):
            continue
        with open(ff, "rb") as f:
            raw = f.read().decode("utf-8", "replace")
        cookies = [c.strip("\n") for c in raw.split("\n%\n") if c.strip()]
        for k, part in enumerate(chunks(cookies, 12000)):
            w.emit("fortunes", f"fortunes/{name} part {k}", part)


def local_text(w: Writer) -> None:
    """This machine's licence texts and plain-text documentation (DROPE_CORPUS_LOCAL=1)."""
    for base in ("/usr/share/common-licenses", "/usr/share/doc"):
        for path in sorted(glob.glob(base + "/**/*", recursive=True)):
            if not os.path.isfile(path) or path.endswith((".gz", ".html", ".png", ".svg")):
                continue
            if os.path.getsize(path) < 500:
                continue
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            if "\x00" in text:
                continue
            if base.endswith("licenses"):
                w.emit("common-licenses", os.path.basename(path), text)
            else:
                w.emit("usr-share-doc", path[len(base) + 1:], text)


def extract(root: str, out: str, local: bool) -> dict[str, tuple[int, int]]:
    """Writes out/docs.jsonl (and out/heldout/persuasion.txt) from the packages unpacked under `root`.

    Returns (documents, characters) per source; out/heldout must exist.
    """
    with open(os.path.join(out, "docs.jsonl"), "w", encoding="utf-8") as f:
        w = Writer(f)
        austen(root, w, os.path.join(out, "heldout"))
        python_docs(root, w)
        perl_docs(root, w)
        jargon(root, w)
        fortunes(root, w)
        if local:
            local_text(w)
    return w.stats


def format_stats(stats: dict[str, tuple[int, int]]) -> str:
    """The per-source table make_corpus prints: documents and MB per source, then the total."""
    lines = [f"  {s:16s} {n:6d} documents  {c / 1e6:7.2f} MB" for s, (n, c) in sorted(stats.items())]
    total_n = sum(n for n, _ in stats.values())
    total_c = sum(c for _, c in stats.values())
    lines.append(f"  {'total':16s} {total_n:6d} documents  {total_c / 1e6:7.2f} MB")
    return "\n".join(lines)
