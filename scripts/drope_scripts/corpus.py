"""Builds a plain-English training corpus from pinned Debian packages (scripts/corpus.lock), offline except
for the configured Debian mirror, then a SentencePiece tokenizer and token shards (drope-data prepare).

  bash scripts/make_corpus.sh            # full corpus (reproduction): ~36 MB of text, vocab 4096
  bash scripts/make_corpus.sh --small    # quickstart corpus: Jane Austen only (~3.5 MB), vocab 2048

Steps, each skipped when its output is already there (idempotent):
  1. apt-get download each package of the set at its pinned version into runs/corpus/debs/ (no install),
     check the .deb's sha256 against the lock file;
  2. dpkg-deb -x into a scratch directory, extract plain text (R lazy-load data for the Austen novels,
     Texinfo for the Python docs, POD for the Perl docs, the Jargon File, fortune files), strip markup
     crudely, write one JSON document per line to runs/corpus/<set>/docs.jsonl. Held out from training
     entirely: Austen's *Persuasion*, written to runs/corpus/<set>/heldout/persuasion.txt (the NIAH
     essay haystack and out-of-distribution text);
  3. drope-data prepare: SentencePiece BPE trained on the train documents, a 5 % document-level
     validation split (seed 0), token shards in runs/data/<set>/ (index.json, tokenizer.model).

Environment: DROPE_BUILD_DIR (default build/), DROPE_CORPUS_DIR (runs/corpus), DROPE_DATA_DIR
(runs/data), DROPE_VOCAB (vocabulary size), DROPE_CORPUS_LOCAL=1: skip the download and use this
machine's /usr/share/common-licenses + /usr/share/doc text instead (for machines without a mirror).
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from . import corpus_text
from .cli import UsageError, env_int, env_switch

ROOT = pathlib.Path(__file__).resolve().parents[2]
LOCK = ROOT / "scripts" / "corpus.lock"
DEFAULT_VOCAB = {"small": 2048, "full": 4096}


class CorpusError(RuntimeError):
    """A step failed; the message says what to do."""


@dataclass(frozen=True)
class Package:
    """One line of corpus.lock."""

    name: str
    version: str
    sha256: str
    sets: tuple[str, ...]

    @property
    def deb_name(self) -> str:
        """The file name apt-get download gives the .deb (the epoch's ':' escaped)."""
        return f"{self.name}_{self.version.replace(':', '%3a', 1)}_all.deb"


def log(msg: str) -> None:
    print(f"\033[1m[corpus]\033[0m {msg}", flush=True)


def read_lock(text: str) -> list[Package]:
    """The packages of a lock file: `name version sha256 sets` a line; '#' comments and blank lines skipped."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 4:
            raise CorpusError(f"{LOCK}:{n}: expected 'name version sha256 sets', got '{line.strip()}'")
        out.append(Package(fields[0], fields[1], fields[2], tuple(fields[3].split(","))))
    return out


def input_stamp(set_name: str, local: bool, lock_text: str) -> str:
    """Names the extraction's inputs (set, local mode, the lock's non-comment lines): a change re-extracts."""
    lines = lock_text.split("\n")
    if lock_text.endswith("\n"):
        lines.pop()
    body = f"set={set_name} local={int(local)}\n" + "".join(l + "\n" for l in lines if not l.startswith("#"))
    return hashlib.sha256(body.encode()).hexdigest()


def sha256_of(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def download(pkg: Package, debs: pathlib.Path) -> pathlib.Path:
    """The package's verified .deb in `debs`: reused when its sha256 matches, else apt-get download."""
    deb = debs / pkg.deb_name
    if deb.is_file() and sha256_of(deb) == pkg.sha256:
        return deb
    log(f"downloading {pkg.name}={pkg.version}")
    deb.unlink(missing_ok=True)
    tmpd = pathlib.Path(tempfile.mkdtemp(prefix=".dl.", dir=debs))
    try:
        tmpd.chmod(0o777)  # apt drops root privileges to _apt for downloads: a writable scratch directory
        r = subprocess.run(["apt-get", "download", "-q", f"{pkg.name}={pkg.version}"], cwd=tmpd,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            sys.stderr.write("".join(f"    {l}\n" for l in r.stdout.splitlines()))
            raise CorpusError(
                f"cannot download {pkg.name}={pkg.version} from the configured Debian mirror. Check 'apt-cache "
                f"policy {pkg.name}'\n       (run 'apt-get update' first); if that version is gone, update "
                "scripts/corpus.lock (name, version,\n       sha256 of the new .deb), or set DROPE_CORPUS_LOCAL=1 "
                "to build a corpus from this machine's own text.")
        got = sorted(tmpd.glob("*.deb"))
        if not got:
            raise CorpusError(f"apt-get download {pkg.name}={pkg.version} wrote no .deb")
        have = sha256_of(got[0])
        if have != pkg.sha256:
            raise CorpusError(f"{pkg.name}={pkg.version}: sha256 {have} does not match the lock file ({pkg.sha256}); "
                              "refusing to use it")
        got[0].replace(deb)
    finally:
        shutil.rmtree(tmpd, ignore_errors=True)
    return deb


def extract(debs: list[pathlib.Path], corpus_dir: pathlib.Path, out: pathlib.Path, local: bool, stamp: str) -> None:
    """Unpacks the .debs into scratch and writes out/docs.jsonl, out/heldout/ and out/.stamp (via out.tmp, renamed)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    (tmp / "heldout").mkdir(parents=True)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix=".x.", dir=corpus_dir))
    try:
        for d in debs:
            subprocess.run(["dpkg-deb", "-x", str(d), str(scratch / "root")], check=True)
        log(f"extracting plain text → {out}/docs.jsonl")
        stats = corpus_text.extract(str(scratch / "root"), str(tmp), local)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if not stats:
        raise CorpusError("no text extracted")
    print(corpus_text.format_stats(stats), flush=True)
    persuasion = tmp / "heldout" / "persuasion.txt"
    if local and not (persuasion.is_file() and persuasion.stat().st_size > 0):
        shutil.rmtree(tmp / "heldout")
        (tmp / "heldout").mkdir()
        shutil.copy("/usr/share/common-licenses/GPL-3", tmp / "heldout" / "GPL-3.txt")  # haystack prose in local mode
    (tmp / ".stamp").write_text(stamp + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.replace(out)


def dataset_ready(ds: pathlib.Path, docs: pathlib.Path, vocab: int) -> bool:
    """Whether ds holds shards newer than docs, with a tokenizer of `vocab` entries."""
    index = ds / "index.json"
    if not index.is_file() or index.stat().st_mtime <= docs.stat().st_mtime:
        return False
    try:
        tok = json.loads(index.read_text(encoding="utf-8")).get("tokenizer", {})
    except (OSError, ValueError):
        return False
    return isinstance(tok, dict) and tok.get("vocab_size") == vocab


def knobs(set_name: str) -> tuple[int, bool]:
    """DROPE_VOCAB (16..1048576; default per set) and DROPE_CORPUS_LOCAL (0 or 1), checked: a UsageError names the
    variable. The studies that build the corpus call it before they start any work."""
    return env_int("DROPE_VOCAB", DEFAULT_VOCAB[set_name], 16, 1 << 20), env_switch("DROPE_CORPUS_LOCAL")


def build(set_name: str) -> None:
    """The three steps for the `small` or `full` set; paths and knobs from the environment."""
    env = os.environ
    build_dir = pathlib.Path(env.get("DROPE_BUILD_DIR", ROOT / "build"))
    corpus_dir = pathlib.Path(env.get("DROPE_CORPUS_DIR", ROOT / "runs" / "corpus"))
    data_dir = pathlib.Path(env.get("DROPE_DATA_DIR", ROOT / "runs" / "data"))
    vocab, local = knobs(set_name)  # UsageError: main says it, exit 2
    out, ds = corpus_dir / set_name, data_dir / set_name
    drope_data = build_dir / "drope-data"
    if not os.access(drope_data, os.X_OK):
        raise CorpusError(f"{drope_data} not found: build first (bash scripts/setup.sh)")

    # 1. download + verify
    (corpus_dir / "debs").mkdir(parents=True, exist_ok=True)
    lock_text = LOCK.read_text(encoding="utf-8")
    debs = []
    if local:
        log("DROPE_CORPUS_LOCAL=1: using /usr/share/common-licenses and /usr/share/doc instead of Debian packages")
    else:
        if shutil.which("apt-get") is None:
            raise CorpusError("apt-get not found; set DROPE_CORPUS_LOCAL=1 to use local text")
        pkgs = [p for p in read_lock(lock_text) if set_name in p.sets]
        if not pkgs:
            raise CorpusError(f"no packages for set '{set_name}' in {LOCK}")
        debs = [download(p, corpus_dir / "debs") for p in pkgs]
        log("packages verified (sha256): " + " ".join(p.name for p in pkgs))

    # 2. extract text
    want = input_stamp(set_name, local, lock_text)
    stamp_file = out / ".stamp"
    if (out / "docs.jsonl").is_file() and stamp_file.is_file() and stamp_file.read_text().strip() == want:
        log(f"text already extracted: {out}/docs.jsonl")
    else:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(ds, ignore_errors=True)
        extract(debs, corpus_dir, out, local, want)

    # 3. tokenizer + shards
    if dataset_ready(ds, out / "docs.jsonl", vocab):
        log(f"dataset already prepared: {ds}")
    else:
        shutil.rmtree(ds, ignore_errors=True)
        data_dir.mkdir(parents=True, exist_ok=True)
        log(f"training a SentencePiece BPE tokenizer (vocab {vocab}) and writing token shards → {ds}")
        subprocess.run([str(drope_data), "prepare", "--input", str(out / "docs.jsonl"), "--out", str(ds),
                        "--train-tokenizer", "--vocab-size", str(vocab), "--model-type", "bpe",
                        "--val-fraction", "0.05", "--seed", "0"], check=True)
    log(f"ready: documents {out}/docs.jsonl, held-out prose {out}/heldout/, dataset {ds} "
        f"(tokenizer {ds}/tokenizer.model)")


def main(argv: list[str]) -> int:
    set_name = "full"
    for a in argv:
        if a in ("--small", "--full"):
            set_name = a[2:]
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            print(f"make_corpus.sh: unknown argument '{a}' (use --small or --full)", file=sys.stderr)
            return 2
    try:
        build(set_name)
    except UsageError as e:
        print(f"make_corpus.sh: {e}", file=sys.stderr)
        return 2
    except CorpusError as e:
        print(f"\033[1;31m[corpus] error:\033[0m {e}", file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as e:
        print(f"\033[1;31m[corpus] error:\033[0m {' '.join(e.cmd)} exited {e.returncode}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
