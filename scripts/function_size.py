"""The function-size limit of .clang-tidy (readability-function-size, LineThreshold) checked without clang-tidy:
a brace-matching scan of C++ and CUDA sources finds every function body and measures it as clang-tidy does
(the line of its closing brace minus the line of its opening one). A function over the limit fails unless it
is marked, with a reason, the way clang-tidy reads it:

    void f() {  // NOLINT(readability-function-size): <reason>
    // NOLINTNEXTLINE(readability-function-size): <reason>      (the line before the function's name)
    // NOLINTBEGIN(readability-function-size): <reason>  ...  // NOLINTEND(readability-function-size)

    python3 scripts/function_size.py [--limit N] [PATH...]   (default: src/ apps/ include/, the limit of .clang-tidy)

Exits 1 naming file:line: function (N lines) for each function over the limit. The scan blanks comments, string
literals and preprocessor lines, so it reads what the compiler reads, not what a macro expands to; lambdas count
as part of the function they are written in."""
import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".cpp", ".cc", ".h", ".hpp", ".cu", ".cuh"}
CHECK = "readability-function-size"
DIRECTIVE = re.compile(r"[ \t]*#")
MARK = re.compile(r"NOLINT(NEXTLINE|BEGIN|END)?\(([^)]*)\)(.*)")
ATTRIBUTES = re.compile(r"\b(__launch_bounds__|alignas|__attribute__|__declspec)\s*\(")
QUALIFIERS = re.compile(r"^(\s*(const|volatile|noexcept|override|final|mutable|try|&&?|->[^{]*|throw\s*\(\s*\)))*\s*$")


@dataclass
class Function:
    name: str
    line: int  # the line of its name (1-based)
    lines: int  # closing brace's line minus opening brace's line
    end: int  # the closing brace's line


def blank(text: str) -> str:
    """The text with comments, string and character literals (raw strings too) and preprocessor lines replaced
    by spaces, newlines kept, so that only the code's own braces and parentheses remain."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and DIRECTIVE.match(text, i):
            j = i
            while True:  # a directive with its backslash continuations
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:k]))
            i = k
            continue
        line_start = c == "\n"
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
        elif c == '"' and re.match(r'(?:u8|[uUL])?R$', text[max(0, i - 3):i]) and not text[i - 1:i].isspace():
            m = re.match(r'"([^(\s]{0,16})\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum() and text[i + 1:i + 2].isalnum()):
            j = i + 1  # (a ' between digits or letters is a digit separator, not a literal)
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def match(code: str, i: int, open_: str, close: str) -> int:
    """The index of the bracket closing the one at i (len(code) when unbalanced)."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == open_:
            depth += 1
        elif code[j] == close:
            depth -= 1
            if depth == 0:
                return j
    return len(code)


def top_level(header: str, chars: str) -> int:
    """The first index of one of `chars` outside (), [] and <> (a template's); -1 if none."""
    depth = 0
    for j, c in enumerate(header):
        if c in chars and depth == 0:
            return j
        if c in "([<":
            depth += 1
        elif c in ")]>" and depth > 0 and not header.startswith("->", j - 1):
            depth -= 1
    return -1


def strip_attributes(header: str) -> str:
    while m := ATTRIBUTES.search(header):
        end = match(header, m.end() - 1, "(", ")")
        header = header[:m.start()] + " " * (end + 1 - m.start()) + header[end + 1:]
    return re.sub(r"\[\[.*?\]\]", lambda m: " " * len(m.group()), header)


def classify(header: str):
    """What a `{` after `header` opens: ("function", name, offset of the name), ("scope",) for a namespace,
    class or extern block, ("init",) for a brace initializer inside a constructor's initializer list, or
    ("data",) for anything else (an initializer, an enum)."""
    h = strip_attributes(header)
    h = re.sub(r"^\s*((public|private|protected)\s*:)?\s*", lambda m: " " * len(m.group()), h)
    if m := re.match(r"\s*template\s*<", h):
        end = top_level_close_angle(h, m.end() - 1)
        h = " " * (end + 1) + h[end + 1:]
    words = h.split()
    if not words:
        return ("data",)
    if "namespace" in words[:2] or words[0] == "extern":
        return ("scope",)
    if words[0] in ("class", "struct", "union"):
        return ("scope",)
    if words[0] == "enum" or (top_level(h, "=") >= 0 and not re.search(r"\boperator\s*[=!<>+\-*/%^&|]*=", h)):
        lam = re.search(r"\]\s*\(", h)
        eq = top_level(h, "=")
        if lam and words[0] != "enum":
            name = re.findall(r"[\w:]+", h[:eq])
            return ("function", name[-1] if name else "lambda", eq)
        return ("data",)
    p = top_level(h, "(")
    if p < 0:
        return ("data",)
    before = h[:p].rstrip()
    if re.search(r"\boperator$", before) and h[p:p + 2] == "()":  # operator()(...)
        p = h.index("(", p + 2)
        before = h[:p].rstrip()
    name = re.search(r"(~?[\w:]*(?:operator\s*\S+|\w+))$", before)
    if not name:
        return ("data",)
    close = match(h, p, "(", ")")
    tail = h[close + 1:]
    init = top_level(tail, ":")
    if init >= 0 and not tail.startswith("::", init):
        if re.search(r"[\w>]\s*$", tail):  # `A() : x_{1}`: the member's braces, the body is yet to come
            return ("init",)
        tail = tail[:init]
    if not QUALIFIERS.match(tail):
        return ("data",)
    label = name.group(1)
    if re.fullmatch(r"[A-Z][A-Z0-9_]{2,}", label):  # a macro that defines a function: TEST(Suite, Name)
        label += "(" + " ".join(h[p + 1:close].split()) + ")"
    return ("function", label, name.start(1))


def top_level_close_angle(h: str, i: int) -> int:
    depth = 0
    for j in range(i, len(h)):
        if h[j] == "<":
            depth += 1
        elif h[j] == ">":
            depth -= 1
            if depth == 0:
                return j
    return len(h) - 1


def functions(text: str) -> list:
    """Every function body of a C++ source (lambdas and local classes count as part of their function)."""
    code = blank(text)
    line_of = [0] * (len(code) + 1)
    line = 1
    for i, c in enumerate(code):
        line_of[i] = line
        line += c == "\n"
    line_of[len(code)] = line
    found, scopes, start, i = [], [], 0, 0
    while i < len(code):
        c = code[i]
        if c == ";":
            start = i + 1
        elif c == "}":
            if scopes:
                scopes.pop()
            start = i + 1
        elif c == "{":
            kind = classify(code[start:i])
            if kind[0] == "scope":
                scopes.append(i)
                start = i + 1
            else:
                end = match(code, i, "{", "}")
                if kind[0] == "function":
                    lead = len(code[start:i]) - len(code[start:i].lstrip())
                    name_at = start + max(kind[2], lead)
                    last = line_of[min(end, len(code))]
                    found.append(Function(kind[1], line_of[name_at], last - line_of[i], last))
                if kind[0] != "init":
                    start = end + 1
                i = end
        i += 1
    return found


def waived(lines: list, f: Function) -> str:
    """"" when `f` is not marked, else the reason given ("?" when the mark has none)."""

    def reason(text: str, kinds: tuple) -> str:
        m = MARK.search(text)
        if not m or (m.group(1) or "") not in kinds or CHECK not in [c.strip() for c in m.group(2).split(",")]:
            return ""
        return m.group(3).lstrip(" :").strip() or "?"

    here = lines[f.line - 1] if f.line - 1 < len(lines) else ""
    if r := reason(here, ("",)):
        return r
    # clang-tidy reports at the name; a mark on the line that opens the body is accepted too
    for k in range(f.line, min(f.line + 8, len(lines))):
        if r := reason(lines[k], ("",)):
            return r
        if "{" in lines[k]:
            break
    if f.line >= 2 and (r := reason(lines[f.line - 2], ("NEXTLINE",))):
        return r
    inside = ""
    for k in range(f.line - 1):
        if r := reason(lines[k], ("BEGIN",)):
            inside = r
        elif reason(lines[k], ("END",)) or re.search(r"NOLINTEND\(" + re.escape(CHECK), lines[k]):
            inside = ""
    return inside


def check_file(path: Path, limit: int, shown: str) -> list:
    text = path.read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    problems = []
    for f in functions(text):
        if f.lines <= limit:
            continue
        why = waived(lines, f)
        if why == "?":
            problems.append(f"{shown}:{f.line}: {f.name} ({f.lines} lines): NOLINT({CHECK}) needs a reason after it")
        elif not why:
            problems.append(f"{shown}:{f.line}: {f.name} is {f.lines} lines, over the limit of {limit}")
    return problems


def tidy_limit() -> int:
    m = re.search(r"readability-function-size\.LineThreshold\s*\n\s*value:\s*(\d+)", (ROOT / ".clang-tidy").read_text())
    return int(m.group(1)) if m else 100


def sources(paths: list) -> list:
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            out += sorted(q for q in p.rglob("*") if q.suffix in SUFFIXES and q.is_file())
        else:
            out.append(p)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", help="files or folders (default: src/ apps/ include/)")
    ap.add_argument("--limit", type=int, default=None, help="lines (default: .clang-tidy's LineThreshold)")
    a = ap.parse_args(argv)
    limit = a.limit if a.limit is not None else tidy_limit()
    paths = a.paths or [ROOT / d for d in ("src", "apps", "include")]
    problems = []
    for f in sources(paths):
        try:
            shown = str(f.resolve().relative_to(ROOT))
        except ValueError:
            shown = str(f)
        problems += check_file(f, limit, shown)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
