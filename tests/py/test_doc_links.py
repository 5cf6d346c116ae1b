"""Every link between the Markdown pages (README.md, CONTRIBUTING.md, docs/, the READMEs of scripts/, configs/hf/
and third_party/) names a file that exists and, with a #fragment, a heading of that page (GitHub's anchors); every
`docs/<page>.md` or `docs/<page>.md#<anchor>` that code, configs, scripts or tests cite names a page and a heading
too. A page merged or a section renamed fails here until every link to it follows."""
import re
import subprocess

import pytest

from drope_scripts.driver import ROOT

PAGES = sorted({ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "scripts" / "README.md",
                ROOT / "configs" / "hf" / "README.md", ROOT / "third_party" / "README.md",
                *(ROOT / "docs").rglob("*.md")})
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (word characters, '-' and ' ' kept), each
    space a '-'."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page) -> set[str]:
    """The anchors of a page's headings, a repeated one numbered -1, -2, ... as GitHub does."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


def links(page) -> list[str]:
    """The targets of the page's Markdown links and images, outside code blocks and code spans."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text(encoding="utf-8")))
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_slugs_follow_github():
    assert slug("Memory plans on 8 × 80 GB") == "memory-plans-on-8--80-gb"
    assert slug("What `--resume` may change") == "what---resume-may-change"
    assert slug("The DroPE reference's checkpoint format") == "the-drope-references-checkpoint-format"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_of_a_page_resolves(page):
    bad = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{target}: {dest.relative_to(ROOT)} has no heading with this anchor")
    assert not bad, f"{page.relative_to(ROOT)}: " + "; ".join(bad)


def test_every_docs_anchor_cited_in_the_tree_exists():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split("\0")
    bad = []
    for name in tracked:
        f = ROOT / name
        if not name or name.startswith("third_party/") or f.suffix in (".png", ".csv", ".gguf", ".bin") \
                or not f.is_file():
            continue
        try:
            text = f.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for page, frag in re.findall(r"\bdocs/([\w./-]+?\.md)\b(?:#([\w-]+))?", text):
            dest = ROOT / "docs" / page
            if frag == "anchor" and page == "design.md":  # design.md's own description of the convention
                continue
            if not dest.is_file():
                bad.append(f"{name}: docs/{page} does not exist")
            elif frag and frag not in anchors(dest):
                bad.append(f"{name}: docs/{page}#{frag}: no such heading")
    assert not bad, "\n".join(bad)
