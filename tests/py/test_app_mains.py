"""Thin apps: every tool's `main` (apps/**/*.cpp) registers its commands and parses flags, in at most 60 lines;
the commands live in apps/<tool>/ and their runs in the library (docs/architecture.md). The counter is checked
on a sample first, so that a parser that finds nothing cannot pass."""
import re

from conftest import ROOT

LIMIT = 60
MAIN = re.compile(r"^\s*int\s+main\s*\(", re.M)


def strip(text: str) -> str:
    """The text with comments, string and character literals blanked (newlines kept), so braces in them do not
    count."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def main_lengths(text: str) -> list:
    """(first line, line count) of each `int main(` in a C++ source, from its signature to its closing brace."""
    code = strip(text)
    found = []
    for m in MAIN.finditer(code):
        start = code.index("{", m.end())
        depth, i = 0, start
        while i < len(code):
            if code[i] == "{":
                depth += 1
            elif code[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        first = code.count("\n", 0, m.start()) + 1
        if code[m.start()] == "\n":
            first += 1
        last = code.count("\n", 0, i) + 1
        found.append((first, last - first + 1))
    return found


def test_counter_on_a_sample():
    sample = '// int main() { in a comment\nint helper() { return 1; }\n\nint main(int argc, char** argv) {\n'
    sample += '  const char* s = "}";  // }\n  if (argc) {\n    return 2;\n  }\n  return 0;\n}\n'
    assert main_lengths(sample) == [(4, 7)]


def test_every_app_main_is_short():
    mains = {}
    for path in sorted((ROOT / "apps").rglob("*.cpp")):
        for first, lines in main_lengths(path.read_text(encoding="utf-8")):
            mains[f"{path.relative_to(ROOT)}:{first}"] = lines
    assert len(mains) >= 6, f"expected the main of every tool under apps/, found {sorted(mains)}"
    long = {where: lines for where, lines in mains.items() if lines > LIMIT}
    assert not long, "main over {} lines (move its commands to apps/<tool>/): {}".format(
        LIMIT, ", ".join(f"{where} has {lines}" for where, lines in long.items()))
