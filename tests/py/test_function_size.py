"""The 100-line function limit (.clang-tidy's readability-function-size) without clang-tidy: scripts/function_size.py
over src/, apps/ and include/. The scanner is checked on synthetic files first (a function one line over the
limit fails with its file, line, name and length; one at the limit passes; braces in strings and comments,
initializer lists, lambdas and macros do not confuse it; a mark without a reason fails), so that a scanner that
finds nothing cannot pass."""
import re
import subprocess
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import function_size

SCRIPT = ROOT / "scripts" / "function_size.py"


def long_function(name: str, n: int, mark: str = "") -> str:
    """A function whose closing brace is n lines below its opening one (n + 1 lines in all)."""
    body = "".join(f"  x += {i};\n" for i in range(n - 2))
    return f"int {name}(int x) {{{mark}\n{body}  return x;\n}}\n"


def lengths(text: str) -> dict:
    return {f.name: (f.line, f.lines) for f in function_size.functions(text)}


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_measures_as_clang_tidy_does():
    # the closing brace's line minus the opening one's: 3 for a one-statement body with braces on their own lines
    assert lengths("int f() {\n  return 1;\n}\n") == {"f": (1, 2)}
    assert lengths(long_function("g", 100)) == {"g": (1, 100)}
    assert lengths("void h()\n{\n  int y = 0;\n  (void)y;\n}\n") == {"h": (1, 3)}


def test_finds_functions_in_every_scope():
    text = """\
namespace a {
namespace {
struct S : Base {
 public:
  S(int v) : v_{v}, w_(v) {
    (void)v;
  }
  int get() const override { return v_; }
  int v_{0};
  std::function<void()> cb_{nullptr};
};
const std::vector<int> kTable = {1, 2, 3};
const auto kLambda = [](int x) {
  return x;
};
enum class E { kA, kB };
}  // namespace
int S::operator()(int x) const noexcept {
  return x;
}
TEST(Suite, Name) {
  EXPECT_EQ(1, 1);
}
template <typename T>
__global__ void __launch_bounds__(256)
    kernel(const T* p) {
  (void)p;
}
}  // namespace a
"""
    got = lengths(text)
    assert got == {
        "S": (5, 2),
        "get": (8, 0),
        "kLambda": (13, 2),
        "S::operator()": (18, 2),
        "TEST(Suite, Name)": (21, 2),
        "kernel": (26, 2),
    }


def test_braces_in_literals_comments_and_directives_do_not_count():
    text = """\
#define OPEN {
int f() {
  const char* s = "}}}{";  // }
  char c = '}';
  /* { */
  auto r = R"x(}})x";
  return 1'000;
}
int g() { return 2; }
"""
    assert lengths(text) == {"f": (2, 6), "g": (9, 0)}


def test_over_the_limit_fails_naming_file_line_function_and_length(tmp_path):
    f = tmp_path / "long.cpp"
    f.write_text("// header\n" + long_function("at_limit", 100) + long_function("too_long", 101))
    r = run("--limit", 100, f)
    assert r.returncode == 1, r.stdout + r.stderr
    line = 1 + 101 + 1  # the header comment, then at_limit's 101 lines
    assert r.stdout.strip() == f"{f}:{line}: too_long is 101 lines, over the limit of 100"
    assert run("--limit", 101, f).returncode == 0


@pytest.mark.parametrize("marked", [
    lambda n: long_function("k", n, "  // NOLINT(readability-function-size): one pass over a tile"),
    lambda n: "// NOLINTNEXTLINE(readability-function-size): one pass over a tile\n" + long_function("k", n),
    lambda n: ("// NOLINTBEGIN(readability-function-size): one pass over a tile\ntemplate <int D>\n"
               + long_function("k", n) + "// NOLINTEND(readability-function-size)\n"),
])
def test_a_mark_with_a_reason_waives_the_limit(tmp_path, marked):
    f = tmp_path / "kernel.cu"
    f.write_text(marked(150))
    r = run("--limit", 100, f)
    assert r.returncode == 0, r.stdout


def test_a_mark_waives_only_its_own_function(tmp_path):
    f = tmp_path / "two.cpp"
    f.write_text("// NOLINTBEGIN(readability-function-size): one pass over a tile\n" + long_function("k", 150)
                 + "// NOLINTEND(readability-function-size)\n" + long_function("other", 150)
                 + "// NOLINTNEXTLINE(bugprone-branch-clone): another check\n" + long_function("third", 150))
    r = run("--limit", 100, f)
    assert r.returncode == 1
    assert re.findall(r": (\w+) is 150 lines", r.stdout) == ["other", "third"]


def test_a_mark_needs_a_reason(tmp_path):
    f = tmp_path / "bare.cpp"
    f.write_text(long_function("k", 150, "  // NOLINT(readability-function-size)"))
    r = run("--limit", 100, f)
    assert r.returncode == 1
    assert "k (150 lines): NOLINT(readability-function-size) needs a reason" in r.stdout


def test_the_limit_is_clang_tidys():
    assert function_size.tidy_limit() == 100


def test_the_tree_keeps_the_limit():
    # the scan reads every function of the tree: far more than a broken parser would find
    found = sum(len(function_size.functions(f.read_text())) for f in function_size.sources([ROOT / "src"]))
    assert found > 1000
    r = run()
    assert r.returncode == 0, "functions over .clang-tidy's limit (split them, or mark a kernel with a reason):\n" \
        + r.stdout
