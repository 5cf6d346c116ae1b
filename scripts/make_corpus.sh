#!/usr/bin/env bash
# Builds a plain-English training corpus from pinned Debian packages (scripts/corpus.lock), offline except
# for the configured Debian mirror, then a SentencePiece tokenizer and token shards (drope-data prepare).
#
#   bash scripts/make_corpus.sh            # full corpus (reproduction): ~36 MB of text, vocab 4096
#   bash scripts/make_corpus.sh --small    # quickstart corpus: Jane Austen only (~3.5 MB), vocab 2048
#
# Steps, each skipped when its output is already there (idempotent):
#   1. apt-get download each package of the set at its pinned version into runs/corpus/debs/ (no install),
#      check the .deb's sha256 against the lock file;
#   2. dpkg-deb -x into a scratch directory, extract plain text (R lazy-load data for the Austen novels,
#      Texinfo for the Python docs, POD for the Perl docs, the Jargon File, fortune files), strip markup
#      crudely, write one JSON document per line to runs/corpus/<set>/docs.jsonl. Held out from training
#      entirely: Austen's *Persuasion*, written to runs/corpus/<set>/heldout/persuasion.txt (the NIAH
#      essay haystack and out-of-distribution text);
#   3. drope-data prepare: SentencePiece BPE trained on the train documents, a 5 % document-level
#      validation split (seed 0), token shards in runs/data/<set>/ (index.json, tokenizer.model).
#
# Environment: DROPE_BUILD_DIR (default build/), DROPE_CORPUS_DIR (runs/corpus), DROPE_DATA_DIR
# (runs/data), DROPE_VOCAB (vocabulary size), DROPE_CORPUS_LOCAL=1: skip the download and use this
# machine's /usr/share/common-licenses + /usr/share/doc text instead (for machines without a mirror).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SET=full
for a in "$@"; do
  case "$a" in
    --small) SET=small ;;
    --full) SET=full ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make_corpus.sh: unknown argument '$a' (use --small or --full)" >&2; exit 2 ;;
  esac
done

BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build}"
CORPUS_DIR="${DROPE_CORPUS_DIR:-$ROOT/runs/corpus}"
DATA_DIR="${DROPE_DATA_DIR:-$ROOT/runs/data}"
LOCK="$ROOT/scripts/corpus.lock"
if [ "$SET" = small ]; then VOCAB="${DROPE_VOCAB:-2048}"; else VOCAB="${DROPE_VOCAB:-4096}"; fi
OUT="$CORPUS_DIR/$SET"
DS="$DATA_DIR/$SET"
log() { printf '\033[1m[corpus]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[corpus] error:\033[0m %s\n' "$*" >&2; exit 1; }

[ -x "$BUILD_DIR/drope-data" ] || die "$BUILD_DIR/drope-data not found: build first (bash scripts/setup.sh)"
command -v python3 >/dev/null || die "python3 is needed for the text extraction"

# ---- 1. download + verify ---------------------------------------------------------------------------
mkdir -p "$CORPUS_DIR/debs"
DEBS=()
if [ "${DROPE_CORPUS_LOCAL:-0}" = 1 ]; then
  log "DROPE_CORPUS_LOCAL=1: using /usr/share/common-licenses and /usr/share/doc instead of Debian packages"
else
  command -v apt-get >/dev/null || die "apt-get not found; set DROPE_CORPUS_LOCAL=1 to use local text"
  while read -r name version sha sets; do
    case "$name" in ''|\#*) continue ;; esac
    [[ ",$sets," == *",$SET,"* ]] || continue
    deb="$CORPUS_DIR/debs/${name}_${version/:/%3a}_all.deb"
    if [ -f "$deb" ] && [ "$(sha256sum "$deb" | cut -d' ' -f1)" = "$sha" ]; then
      DEBS+=("$deb"); continue
    fi
    log "downloading $name=$version"
    rm -f "$deb"
    # apt drops root privileges to _apt for downloads: give it a writable scratch directory.
    tmpd="$(mktemp -d "$CORPUS_DIR/debs/.dl.XXXXXX")"; chmod 777 "$tmpd"
    if ! (cd "$tmpd" && apt-get download -q "$name=$version" >"$tmpd/.log" 2>&1); then
      sed 's/^/    /' "$tmpd/.log" >&2; rm -rf "$tmpd"
      die "cannot download $name=$version from the configured Debian mirror. Check 'apt-cache policy $name'
       (run 'apt-get update' first); if that version is gone, update scripts/corpus.lock (name, version,
       sha256 of the new .deb), or set DROPE_CORPUS_LOCAL=1 to build a corpus from this machine's own text."
    fi
    got="$(ls "$tmpd"/*.deb 2>/dev/null | head -1)"
    [ -n "$got" ] || { rm -rf "$tmpd"; die "apt-get download $name=$version wrote no .deb"; }
    have="$(sha256sum "$got" | cut -d' ' -f1)"
    if [ "$have" != "$sha" ]; then
      rm -rf "$tmpd"
      die "$name=$version: sha256 $have does not match the lock file ($sha); refusing to use it"
    fi
    mv "$got" "$deb"; rm -rf "$tmpd"
    DEBS+=("$deb")
  done <"$LOCK"
  [ "${#DEBS[@]}" -gt 0 ] || die "no packages for set '$SET' in $LOCK"
  log "packages verified (sha256): $(for d in "${DEBS[@]}"; do basename "$d" | cut -d_ -f1; done | tr '\n' ' ')"
fi

# ---- 2. extract text ---------------------------------------------------------------------------------
# The stamp names the inputs; a changed lock (or local mode) re-extracts.
STAMP_WANT="$( { echo "set=$SET local=${DROPE_CORPUS_LOCAL:-0}"; grep -v '^#' "$LOCK"; } | sha256sum | cut -d' ' -f1)"
if [ -f "$OUT/docs.jsonl" ] && [ "$(cat "$OUT/.stamp" 2>/dev/null)" = "$STAMP_WANT" ]; then
  log "text already extracted: $OUT/docs.jsonl"
else
  rm -rf "$OUT" "$DS"
  SCRATCH="$(mktemp -d "$CORPUS_DIR/.x.XXXXXX")"
  trap 'rm -rf "$SCRATCH"' EXIT
  for d in "${DEBS[@]}"; do dpkg-deb -x "$d" "$SCRATCH/root"; done
  mkdir -p "$OUT.tmp/heldout"
  log "extracting plain text → $OUT/docs.jsonl"
  python3 - "$SCRATCH/root" "$OUT.tmp" "${DROPE_CORPUS_LOCAL:-0}" <<'PY'
import glob, gzip, json, os, re, struct, sys, zlib

root, out, local = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
docs = open(os.path.join(out, "docs.jsonl"), "w", encoding="utf-8")
stats = {}

def clean(text):
    text = text.replace("\r\n", "\n").replace("\t", "    ")
    text = re.sub(r"[ \u00a0]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()

def emit(source, title, text):
    text = clean(text)
    if len(text) < 200:  # headings, empty menus
        return
    docs.write(json.dumps({"text": text, "source": source, "title": title}, ensure_ascii=False) + "\n")
    n, c = stats.get(source, (0, 0))
    stats[source] = (n + 1, c + len(text))

def unwrap(lines):
    """Hard-wrapped prose → one line per paragraph, blank line between paragraphs."""
    paras, cur = [], []
    for l in lines:
        if l.strip():
            cur.append(l.strip())
        elif cur:
            paras.append(" ".join(cur)); cur = []
    if cur:
        paras.append(" ".join(cur))
    return "\n\n".join(paras)

def chunks(parts, size):
    """Groups consecutive parts (joined by blank lines) into documents of about `size` characters."""
    cur, n = [], 0
    for p in parts:
        cur.append(p); n += len(p)
        if n >= size:
            yield "\n\n".join(cur); cur, n = [], 0
    if cur:
        yield "\n\n".join(cur)

# --- Jane Austen (r-cran-janeaustenr): R lazy-load database of six character vectors -----------------
def r_strings(blob):
    assert blob[:2] == b"X\n", "not an XDR R serialisation"
    p = 2
    ver, = struct.unpack(">i", blob[p:p + 4]); p += 12
    if ver == 3:
        n, = struct.unpack(">i", blob[p:p + 4]); p += 4 + n
    flags, = struct.unpack(">i", blob[p:p + 4]); p += 4
    assert flags & 0xFF == 16, "expected a character vector"
    n, = struct.unpack(">i", blob[p:p + 4]); p += 4
    lines = []
    for _ in range(n):
        _, L = struct.unpack(">ii", blob[p:p + 8]); p += 8
        if L < 0:
            lines.append(""); continue
        lines.append(blob[p:p + L].decode("utf-8", "replace")); p += L
    return lines

for rdb in glob.glob(os.path.join(root, "usr/lib/R/site-library/janeaustenr/data/Rdata.rdb")):
    data = open(rdb, "rb").read()
    i = 0
    while i < len(data):
        z = zlib.decompressobj()
        blob = z.decompress(data[i + 4:])
        i += 4 + len(data[i + 4:]) - len(z.unused_data)
        lines = r_strings(blob)
        title = next(l for l in lines if l.strip()).strip().title()
        if title == "Persuasion":  # held out entirely
            with open(os.path.join(out, "heldout", "persuasion.txt"), "w", encoding="utf-8") as f:
                f.write(unwrap(lines) + "\n")
            continue
        chapter, name = [], title
        for l in lines + ["CHAPTER END"]:
            if re.match(r"^\s*(CHAPTER|Chapter)\s+[0-9IVXLC]+\.?\s*$", l) or l == "CHAPTER END":
                emit("janeaustenr", name, unwrap(chapter))
                chapter, name = [], f"{title}, {l.strip().title()}"
            else:
                chapter.append(l)

# --- Python 3.11 documentation (python3.11-doc): the Texinfo manual -----------------------------------
for info in glob.glob(os.path.join(root, "usr/share/info/python3.11.info*.gz")):
    raw = gzip.open(info, "rt", encoding="utf-8", errors="replace").read()
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
    for k, text in enumerate(chunks(parts, 12000)):
        emit("python3.11-doc", f"Python docs part {k}", text)

# --- Perl documentation (perl-doc): POD ----------------------------------------------------------------
def pod_to_text(pod):
    out, keep = [], True
    for block in re.split(r"\n\s*\n", pod):
        b = block.strip("\n")
        if b.startswith("="):
            cmd, _, rest = b[1:].partition(" ")
            cmd = cmd.split("\n")[0]
            if cmd in ("begin", "for"):
                keep = cmd == "for"; continue
            if cmd == "end":
                keep = True; continue
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
        text = re.sub(r"E<lt>", "<", text); text = re.sub(r"E<gt>", ">", text)
        text = re.sub(r"E<[^<>]*>", "", text)
        text = re.sub(r"[BCFISXZL]<([^<>]*)>", r"\1", text)
    return text

for pod in sorted(glob.glob(os.path.join(root, "usr/share/perl/*/pod/*.pod"))):
    name = os.path.basename(pod)[:-4]
    if name in ("perltoc", "perluniprops", "perlapi", "perlintern"):  # generated indices and C API lists
        continue
    text = pod_to_text(open(pod, encoding="utf-8", errors="replace").read())
    for k, part in enumerate(chunks(text.split("\n\n"), 20000)):
        emit("perl-doc", f"{name} part {k}", part)

# --- The Jargon File (jargon-text) ---------------------------------------------------------------------
for jf in glob.glob(os.path.join(root, "usr/share/doc/jargon-text/jargon.txt.gz")):
    text = gzip.open(jf, "rt", encoding="utf-8", errors="replace").read()
    paras = [p for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 40]  # drops the one-word glossary index
    for k, part in enumerate(chunks([unwrap(p.split("\n")) for p in paras], 12000)):
        emit("jargon-text", f"Jargon File part {k}", part)

# --- fortune cookies (fortunes): '%'-separated, grouped per file ---------------------------------------
for ff in sorted(glob.glob(os.path.join(root, "usr/share/games/fortunes/*"))):
    name = os.path.basename(ff)
    if "." in name or os.path.islink(ff) or name in ("art", "ascii-art"):
        continue
    raw = open(ff, "rb").read().decode("utf-8", "replace")
    cookies = [c.strip("\n") for c in raw.split("\n%\n") if c.strip()]
    for k, part in enumerate(chunks(cookies, 12000)):
        emit("fortunes", f"fortunes/{name} part {k}", part)

# --- fallback: this machine's own text -----------------------------------------------------------------
if local:
    for base in ("/usr/share/common-licenses", "/usr/share/doc"):
        for path in sorted(glob.glob(base + "/**/*", recursive=True)):
            if not os.path.isfile(path) or path.endswith((".gz", ".html", ".png", ".svg")) or os.path.getsize(path) < 500:
                continue
            text = open(path, "rb").read().decode("utf-8", "replace")
            if "\x00" in text:
                continue
            if base.endswith("licenses"):
                emit("common-licenses", os.path.basename(path), text)
            else:
                emit("usr-share-doc", path[len(base) + 1:], text)
docs.close()
if not stats:
    sys.exit("no text extracted")
total = sum(c for _, c in stats.values())
for s, (n, c) in sorted(stats.items()):
    print(f"  {s:16s} {n:6d} documents  {c / 1e6:7.2f} MB")
print(f"  {'total':16s} {sum(n for n, _ in stats.values()):6d} documents  {total / 1e6:7.2f} MB")
PY
  if [ "${DROPE_CORPUS_LOCAL:-0}" = 1 ] && [ ! -s "$OUT.tmp/heldout/persuasion.txt" ]; then
    rm -rf "$OUT.tmp/heldout"; mkdir -p "$OUT.tmp/heldout"
    cp /usr/share/common-licenses/GPL-3 "$OUT.tmp/heldout/GPL-3.txt"   # haystack prose in local mode
  fi
  echo "$STAMP_WANT" >"$OUT.tmp/.stamp"
  rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
  rm -rf "$SCRATCH"; trap - EXIT
fi

# ---- 3. tokenizer + shards -----------------------------------------------------------------------------
if [ -f "$DS/index.json" ] && [ "$DS/index.json" -nt "$OUT/docs.jsonl" ] \
   && grep -q "vocab $VOCAB\"" "$DS/index.json"; then
  log "dataset already prepared: $DS"
else
  rm -rf "$DS"; mkdir -p "$DATA_DIR"
  log "training a SentencePiece BPE tokenizer (vocab $VOCAB) and writing token shards → $DS"
  "$BUILD_DIR/drope-data" prepare --input "$OUT/docs.jsonl" --out "$DS" --train-tokenizer \
    --vocab-size "$VOCAB" --model-type bpe --val-fraction 0.05 --seed 0
fi
log "ready: documents $OUT/docs.jsonl, held-out prose $OUT/heldout/, dataset $DS (tokenizer $DS/tokenizer.model)"
