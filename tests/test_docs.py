"""The README and docs/ as a reader follows them: every relative link names a file that exists,
and every #anchor a heading of that file (as GitHub forms anchors from headings)."""

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(
    f"docs/{name}" for name in os.listdir(os.path.join(ROOT, "docs")) if name.endswith(".md")
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchors(path: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower case, punctuation but - and _ gone,
    spaces as -, a repeated heading numbered -1, -2, ..."""
    found: set[str] = set()
    in_code = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            if in_code or not line.startswith("#"):
                continue
            slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in found:
                n += 1
                anchor = f"{slug}-{n}"
            found.add(anchor)
    return found


def test_anchors_follow_githubs_rule(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Recipes\n## A vocabulary sized from the data: `data.vocab_size: 0`\n## Recipes\n```\n# not a heading\n```\n"
    )
    assert anchors(str(page)) == {"recipes", "a-vocabulary-sized-from-the-data-datavocab_size-0", "recipes-1"}


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        path, _, anchor = target.partition("#")
        path = (
            os.path.normpath(os.path.join(os.path.dirname(os.path.join(ROOT, page)), path))
            if path
            else os.path.join(ROOT, page)
        )
        if not os.path.exists(path):
            broken.append(target)
        elif anchor and path.endswith(".md") and anchor not in anchors(path):
            broken.append(target)
    assert broken == []


PAGE_LINES = 250  # a page a reader takes in: current tables and one line per decision
HEADER_LINES, SETTING_LINES = 12, 2  # a config's opening comment (what, data, commands), a setting's why


@pytest.mark.parametrize("page", PAGES)
def test_every_page_stays_short(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as f:
        assert len(f.read().splitlines()) <= PAGE_LINES


def comment_blocks(path: str) -> list[tuple[int, int]]:
    """(first line, length) of each run of whole-line comments in a YAML file."""
    blocks, start = [], None
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines() + [""]
    for number, line in enumerate(lines):
        if line.strip().startswith("#"):
            start = number if start is None else start
        elif start is not None:
            blocks.append((start, number - start))
            start = None
    return blocks


CONFIGS = sorted(
    os.path.relpath(os.path.join(d, name), ROOT)
    for d, _, names in os.walk(os.path.join(ROOT, "configs"))
    for name in names
    if name.endswith(".yaml")
)


@pytest.mark.parametrize("config", CONFIGS)
def test_config_comments_give_a_line_or_two_of_why_not_results(config):
    for start, length in comment_blocks(os.path.join(ROOT, config)):
        assert length <= (HEADER_LINES if start == 0 else SETTING_LINES), f"line {start + 1}: {length} comment lines"
