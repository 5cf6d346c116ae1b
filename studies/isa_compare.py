"""Two runs of one pipeline side by side: reads their Markdown results (the same tables, e.g. a quickstart at two
instruction-set levels) and writes the first run's tables with every cell that differs as "A → B", then the
largest absolute differences. Tables must have the same rows and columns; anything else is an error naming the
line.

  bash studies/run.sh isa_compare avx2=runs/quickstart-avx2/results.md \\
      baseline=runs/quickstart-baseline/results.md --out runs/quickstart-isa.md
"""
from __future__ import annotations

import pathlib
import re
import sys
from dataclasses import dataclass

from drope_scripts import cli
from drope_scripts.atomic import write_atomic

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class Difference:
    delta: float
    where: str
    a: str
    b: str


def is_separator(line: str) -> bool:
    return bool(re.fullmatch(r"\|[|\-: ]+", line.strip()))


def table_rows(text: str) -> list[tuple[int, list[str], bool]]:
    """(line number, cells, is a header) of every Markdown table row, separator rows left out; a header is the
    row above a separator."""
    lines = text.splitlines()
    rows = []
    for i, line in enumerate(lines):
        s = line.strip()
        if s.startswith("|") and s.endswith("|") and not is_separator(s):
            header = i + 1 < len(lines) and is_separator(lines[i + 1])
            rows.append((i + 1, [c.strip() for c in s[1:-1].split("|")], header))
    return rows


def compare(a: str, b: str, label_a: str, label_b: str) -> tuple[str, list[Difference], int]:
    """The merged tables (A's text, differing cells as "A → B"), the differences (largest first) and the number
    of numeric cells compared."""
    ra, rb = table_rows(a), table_rows(b)
    if len(ra) != len(rb):
        raise ValueError(f"{label_a} has {len(ra)} table rows, {label_b} {len(rb)}: not the same tables")
    merged = a.splitlines()
    diffs, cells = [], 0
    header: list[str] = []
    for (line, ca, is_header), (line_b, cb, _) in zip(ra, rb):
        if len(ca) != len(cb) or ca[0] != cb[0]:
            raise ValueError(f"{label_a} line {line} and {label_b} line {line_b} are not the same row: "
                             f"'{ca[0]}' vs '{cb[0]}'")
        if is_header:
            header = ca
            if ca != cb:
                raise ValueError(f"{label_a} line {line} and {label_b} line {line_b}: different table headers")
            continue
        out = [ca[0]]
        for j, (x, y) in enumerate(zip(ca[1:], cb[1:]), 1):
            nx, ny = NUMBER.findall(x), NUMBER.findall(y)
            if nx and len(nx) == len(ny):
                cells += 1
            if x == y:
                out.append(x)
                continue
            out.append(f"{x} → {y}")
            if nx and len(nx) == len(ny):
                column = header[j] if j < len(header) else f"column {j}"
                delta = max(abs(float(p) - float(q)) for p, q in zip(nx, ny))
                diffs.append(Difference(delta, f"{ca[0]} / {column}", x, y))
        merged[line - 1] = "| " + " | ".join(out) + " |"
    diffs.sort(key=lambda d: -d.delta)
    return "\n".join(merged) + "\n", diffs, cells


def report(a: str, b: str, label_a: str, label_b: str, top: int = 8) -> str:
    merged, diffs, cells = compare(a, b, label_a, label_b)
    lines = [f"# {label_a} → {label_b}: the same run at two instruction-set levels\n",
             f"{len(diffs)} of {cells} numeric cells differ; a differing cell reads \"{label_a} → {label_b}\".\n"]
    if diffs:
        lines.append("Largest differences (absolute, in the cell's unit):\n")
        lines += [f"- {d.where}: {d.a} → {d.b} (Δ {d.delta:g})" for d in diffs[:top]]
        lines.append("")
    return "\n".join(lines) + "\n" + merged


def _read(spec: str) -> tuple[str, pathlib.Path, str]:
    label, sep, path = spec.partition("=")
    if not sep or not label or not path:
        raise ValueError(f"expected LABEL=FILE, got '{spec}'")
    p = cli.caller_path(path)
    if not p.is_file():
        raise ValueError(f"{p}: not a regular file")
    if p.stat().st_size > MAX_BYTES:
        raise ValueError(f"{p}: {p.stat().st_size} bytes, more than the {MAX_BYTES} a results page may have")
    return label, p, p.read_text(encoding="utf-8")


def main(argv: list[str]) -> int:
    ap = cli.Parser("isa_compare", prog="studies/run.sh isa_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="LABEL=results.md of the first run")
    ap.add_argument("b", help="LABEL=results.md of the second run")
    ap.add_argument("--out", type=pathlib.Path, required=True, help="Markdown to write")
    args = ap.parse_args(argv)
    args.out = ap.check(cli.out_file, cli.caller_path(args.out), "--out")
    try:
        (la, pa, ta), (lb, pb, tb) = _read(args.a), _read(args.b)
        if args.out.resolve() in (pa.resolve(), pb.resolve()):
            raise ValueError(f"--out {args.out} is one of the inputs")
        text = report(ta, tb, la, lb)
    except (ValueError, OSError, UnicodeDecodeError) as e:
        print(f"isa_compare: {e}", file=sys.stderr)
        return 2
    write_atomic(args.out, text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
