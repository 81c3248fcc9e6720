"""Inline markup through --format html's code (markup/translation.py) on the demo model.

Each demo test sentence with an adjective and a noun gets, in turn, a tag around its number, its
adjective, its noun, adjective and noun, adjective and noun nested (<b>red <i>apples</i></b>), or
a link with attributes; the German words each tag must come back around are known from the demo
grammar (data/demo_data.py). Prints how many tags sit around the right words, whether every
output is well-formed with the input's elements, the BLEU of the outputs with their tags taken out
against that of the same sentences sent without tags, and both speeds (sentences/s, best of 3).

    python scripts/markup_bench.py --checkpoint runs/demo --src data/demo/test.en --ref data/demo/test.de
"""

from __future__ import annotations

import argparse
import re
from html.parser import HTMLParser

import sacrebleu

import mt_transformer as mt
from measure import fastest
from mt_transformer.data.demo_data import ADJECTIVES, NOUNS, number_word
from mt_transformer.markup.translation import translate_html

KINDS = ["number", "adjective", "noun", "phrase", "nested", "link"]
LINK = '<a href="/shop?item=1&amp;view=2" title="a &quot;deal&quot;">'


class Contents(HTMLParser):
    """Each element's start tag and the text inside it, in order; the text without tags; whether
    the tags nest."""

    def __init__(self, fragment: str):
        super().__init__()
        self.elements, self.open, self.text, self.nested = [], [], "", True
        self.feed(fragment)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.elements.append([tag, ""])
        self.open.append(len(self.elements) - 1)

    def handle_endtag(self, tag):
        k = self.open.pop() if self.open else None
        self.nested = self.nested and k is not None and self.elements[k][0] == tag

    def handle_data(self, data):
        self.text += data
        for k in self.open:
            self.elements[k][1] += data


def tagged(line: str, kind: str) -> tuple[str, list[tuple[str, list[str]]]] | None:
    """The line with a tag of `kind`, and per element (its tag, the German words it must hold, as
    predicates on an output's words): None where the line has no such words."""
    words = line.rstrip(".").split()
    adjective = next((i for i, w in enumerate(words) if w in dict(ADJECTIVES)), None)
    if adjective is None or adjective + 1 >= len(words):
        return None
    stem = dict(ADJECTIVES)[words[adjective]]
    noun = next(n for n in NOUNS if words[adjective + 1] in (n[0], n[1]))
    german_noun = noun[3] if words[adjective + 1] == noun[0] else noun[4]
    adj = (stem, lambda w: w.startswith(stem) and len(w) <= len(stem) + 2)
    nn = (german_noun, lambda w: w == german_noun)
    if kind == "number":
        if not words[adjective - 1].isdigit():
            return None
        spans, wanted = [(adjective - 1, adjective, "b")], [[(number_word(int(words[adjective - 1])), None)]]
    elif kind in ("adjective", "noun"):
        at = adjective if kind == "adjective" else adjective + 1
        spans, wanted = [(at, at + 1, "em")], [[adj if kind == "adjective" else nn]]
    else:
        spans, wanted = [(adjective, adjective + 2, {"phrase": "b", "nested": "b", "link": "a"}[kind])], [[adj, nn]]
        if kind == "nested":
            spans.append((adjective + 1, adjective + 2, "i"))
            wanted.append([nn])
    out = list(words)
    for first, last, tag in reversed(spans):  # the inner element first: its end tag goes inside the outer's
        out[first] = (LINK if tag == "a" else f"<{tag}>") + out[first]
        out[last - 1] = out[last - 1] + f"</{tag}>"
    return " ".join(out) + ".", [(tag, w) for (_, _, tag), w in zip(spans, wanted)]


def right_words(inside: str, wanted) -> bool:
    words = re.findall(r"\w+", inside)
    if len(words) != len(wanted):
        return False
    return all((test(w) if test else w == name) for w, (name, test) in zip(words, wanted))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--lines", type=int, default=60)
    parser.add_argument("--engine", default="auto")
    args = parser.parse_args()
    sources = open(args.src, encoding="utf-8").read().splitlines()
    references = open(args.ref, encoding="utf-8").read().splitlines()
    cases = []
    for line, reference in zip(sources, references):
        made = tagged(line, KINDS[len(cases) % len(KINDS)])
        if made:
            cases.append((line, reference, *made))
        if len(cases) == args.lines:
            break
    model = mt.load(args.checkpoint, engine=args.engine)
    translator = model.translator
    html, html_time = fastest(translate_html, translator, [c[2] for c in cases])
    plain, plain_time = fastest(lambda lines: [r[0].text for r in translator(lines)], [c[0] for c in cases])
    right = total = formed = 0
    for (_, _, given, wanted), out in zip(cases, html):
        found, source = Contents(out), Contents(given)
        same = [e[0] for e in found.elements] == [e[0] for e in source.elements] and (LINK in out) == (LINK in given)
        formed += found.nested and same
        for (tag, words), (out_tag, inside) in zip(wanted, found.elements):
            total += 1
            right += out_tag == tag and right_words(inside, words)
    refs = [[c[1] for c in cases]]
    stripped = sacrebleu.corpus_bleu([Contents(out).text for out in html], refs).score
    share = f"{right}/{total} ({100 * right / total:.1f}%)"
    print(f"{len(cases)} lines, engine {model.engine}: tags around the right words {share}")
    print(f"well-formed with the input's elements: {formed}/{len(cases)}")
    sent_plain = sacrebleu.corpus_bleu(plain, refs).score
    print(f"BLEU without tags {stripped:.2f}, the same sentences sent plain {sent_plain:.2f}")
    speeds = f"html {len(cases) / html_time:.1f}, plain {len(cases) / plain_time:.1f}"
    print(f"sentences/s: {speeds} ({plain_time / html_time:.2f}x)")


if __name__ == "__main__":
    main()
