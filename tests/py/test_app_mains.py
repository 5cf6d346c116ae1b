"""Thin apps: every tool's `main` (apps/**/*.cpp) registers its commands and parses flags, in at most 60 lines;
the commands live in apps/<tool>/ and their runs in the library (docs/architecture.md). The counter is checked
on a sample first, so that a parser that finds nothing cannot pass."""
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import function_size

LIMIT = 60


def main_lengths(text: str) -> list:
    """(first line, line count) of each `main` in a C++ source, from its signature to its closing brace (the
    function-size scanner's reading of the source: comments and literals blanked, braces matched)."""
    return [(f.line, f.end - f.line + 1) for f in function_size.functions(text) if f.name == "main"]


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
