"""Inline markup on a real test set, judged by an aligner that knows nothing of the model.

Each test source gets one inline element around a span of one to three words that eflomal aligns
cleanly to the reference (so a right place exists; the span and tag drawn as data.augment's
inline_tags draws them), and goes through --format html's code (markup/translation.py). An element
is on the right words when it wraps exactly the output words from the first to the last that
eflomal aligns to its source words, eflomal aligning the sources with the outputs (tags removed)
beside --train-pairs pairs of the training corpus for its statistics; or, less strictly, when its
words are a consistent phrase pair with the source span's (placement()). eflomal samples, so it
judges --judges times and the shares are their mean (and range). Prints both shares (elements
whose words eflomal leaves unaligned in the output are counted apart), the share of the output
words eflomal aligns that the model's own alignment takes to one of the same words, the share of outputs
well-formed with the input's elements, the BLEU of the outputs without their tags and of the same
sources sent plain, and both speeds (sentences/s, best of --rounds taken in turns). Last, the
tagged sources sent as plain text, as an app that does not say it sends HTML sends them: how many outputs keep the
element, well-formed, and their BLEU with tags removed (data.augment's inline_tags teaches this).

    python scripts/markup_corpus_bench.py --checkpoint RUN [RUN ...] --src test.de --ref test.en \
        --train-src train.de --train-tgt train.en [--lines 1000] [--json out.json]

Several checkpoints are judged on the same elements (eflomal draws them anew each run), so that
their shares compare within one run.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from html.parser import HTMLParser

import sacrebleu

import mt_transformer as mt
from measure import machine_line, write_json
from mt_transformer.data.augment import inline_tags
from mt_transformer.data.word_alignment import align_words, flat
from mt_transformer.decoding.alignment import aligned_words
from mt_transformer.markup.translation import translate_html


class Elements(HTMLParser):
    """A fragment's text without tags, and each element's tag and (start, end) in that text;
    whether its end tags close what they open."""

    def __init__(self, fragment: str):
        super().__init__(convert_charrefs=True)
        self.text, self.elements, self.open, self.nested = "", [], [], True
        self.feed(fragment)
        self.close()
        self.nested = self.nested and not self.open

    def handle_starttag(self, tag, attrs):
        self.open.append(len(self.elements))
        self.elements.append([tag, len(self.text), None])

    def handle_endtag(self, tag):
        k = self.open.pop() if self.open else None
        self.nested = self.nested and k is not None and self.elements[k][0] == tag
        if k is not None:
            self.elements[k][2] = len(self.text)

    def handle_data(self, data):
        self.text += data


def word_range(text: str, start: int, end: int) -> tuple[int, int] | None:
    """The first and last whitespace-separated words of `text` that [start, end) overlaps."""
    inside = [k for k, m in enumerate(re.finditer(r"\S+", text)) if m.start() < end and m.end() > start]
    return (inside[0], inside[-1]) if inside else None


def alternating(rounds: int, *calls):
    """Each call's result and its best time over `rounds`, the calls taking turns in every round
    (so that a slower spell of the machine falls on all of them)."""
    best, results = [float("inf")] * len(calls), [None] * len(calls)
    for _ in range(rounds):
        for k, call in enumerate(calls):
            started = time.perf_counter()
            results[k] = call()
            best[k] = min(best[k], time.perf_counter() - started)
    return results, best


def read(path: str, count: int) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for _, line in zip(range(count), f)]


def tagged_cases(sources, references, links, seed: int):
    """(tagged source, the source span's words) per line that has a cleanly aligned span."""
    rng, cases = random.Random(seed), []
    for k, (source, reference) in enumerate(zip(sources, references)):
        made = inline_tags(source, reference, flat(links[k]), rng)
        if made:
            parsed = Elements(made[0])
            cases.append((k, made[0], word_range(parsed.text, *parsed.elements[0][1:])))
    return cases


def placement(cases, outputs, out_links) -> dict:
    """Counts: `exact`, elements that wrap the first to the last output word eflomal aligns to
    their words; `consistent`, those whose words hold every such word and no word aligned outside
    their source words (a consistent phrase pair, as phrase extraction takes them: words eflomal
    leaves unaligned may join at the edges); `judged`; `unaligned`, elements eflomal aligns to no
    output word; `formed`, outputs well-formed with the input's elements."""
    counts = dict.fromkeys(("exact", "consistent", "judged", "unaligned", "formed"), 0)
    for (_, given, (first, last)), out, links in zip(cases, outputs, out_links):
        found = Elements(out)
        counts["formed"] += found.nested and [e[0] for e in found.elements] == [e[0] for e in Elements(given).elements]
        aligned = [t for s, t in links if first <= s <= last]
        if not aligned:
            counts["unaligned"] += 1
            continue
        counts["judged"] += 1
        span = word_range(found.text, *found.elements[0][1:]) if found.elements else None
        if span is None:
            continue
        counts["exact"] += span == (min(aligned), max(aligned))
        outside = any(span[0] <= t <= span[1] and not first <= s <= last for s, t in links)
        counts["consistent"] += span[0] <= min(aligned) and max(aligned) <= span[1] and not outside
    return counts


def model_links(translator, lines: list[str]) -> list[list[tuple[int, int]]]:
    """The model's own word alignment of each line's translation (format html's, before spans)."""
    best = [r[0] for r in translator.with_attention()(lines)]
    sources, outputs = translator.source_ids(lines), [t.tokens for t in best]
    return [pairs for pairs, _, _ in aligned_words(translator, sources, outputs, known=[t.attention for t in best])]


def agreement(found: list, judge: list) -> float:
    """The share of the output words `judge` aligns whose alignment in `found` (a line's pairs)
    takes one of the source words the judge gives them."""
    agree = total = 0
    for ours, theirs in zip(found, judge):
        mine = {t: {s for s, u in ours if u == t} for _, t in theirs}
        for t in {t for _, t in theirs}:
            total += 1
            agree += bool(mine[t] & {s for s, u in theirs if u == t})
    return agree / max(total, 1)


def measure(checkpoint: str, args, cases, sources, references, stats) -> dict:
    """One model's shares, BLEU and speeds on `cases` (tagged_cases'), judged with `stats`."""
    model = mt.load(checkpoint, engine=args.engine)
    translator = model.translator
    tagged, plain_lines = [c[1] for c in cases], [sources[c[0]] for c in cases]
    (html, plain), (html_time, plain_time) = alternating(
        args.rounds, lambda: translate_html(translator, tagged), lambda: [r[0].text for r in translator(plain_lines)]
    )
    stripped = [Elements(out).text for out in html]
    judges = [align_words(stats[0] + plain_lines, stats[1] + stripped)[len(stats[0]) :] for _ in range(args.judges)]
    judged = [placement(cases, html, links) for links in judges]
    counts = {name: sum(c[name] for c in judged) / len(judged) for name in judged[0]}
    agreed = [agreement(model_links(translator, plain_lines), links) for links in judges]
    as_text = [r[0].text for r in translator(tagged)]
    kept = sum(placement([c], [out], [[]])["formed"] for c, out in zip(cases, as_text))
    refs = [[references[c[0]] for c in cases]]
    return {
        "checkpoint": checkpoint,
        "engine": model.engine,
        "lines": len(cases),
        **counts,
        "judges": {name: [c[name] for c in judged] for name in ("exact", "consistent", "judged")},
        "words_agreeing": sum(agreed) / len(agreed),
        "bleu_html_without_tags": sacrebleu.corpus_bleu(stripped, refs).score,
        "bleu_plain": sacrebleu.corpus_bleu(plain, refs).score,
        "as_text_kept": kept,
        "bleu_as_text_without_tags": sacrebleu.corpus_bleu([Elements(out).text for out in as_text], refs).score,
        "html_sentences_per_s": len(cases) / html_time,
        "plain_sentences_per_s": len(cases) / plain_time,
    }


def report(result: dict) -> None:
    lines = result["lines"]
    print(f"{result['checkpoint']}, engine {result['engine']}, {lines} tagged lines")
    for name in ("exact", "consistent"):
        shares = [100 * n / max(j, 1) for n, j in zip(result["judges"][name], result["judges"]["judged"])]
        share = f"{result[name]:.1f}/{result['judged']:.1f} ({sum(shares) / len(shares):.1f}%"
        print(f"elements on the right words ({name}): {share}, {min(shares):.1f}-{max(shares):.1f}% by judge)")
    print(f"left unaligned by eflomal: {result['unaligned']:.1f}")
    print(f"output words eflomal aligns that the model aligns to one of the same words: {result['words_agreeing']:.1%}")
    print(f"well-formed with the input's elements: {result['formed']:.0f}/{lines}")
    bleu = result["bleu_html_without_tags"], result["bleu_plain"]
    print("BLEU without tags {:.2f}, the same sources plain {:.2f}".format(*bleu))
    html, plain = result["html_sentences_per_s"], result["plain_sentences_per_s"]
    print(f"sentences/s: html {html:.1f}, plain {plain:.1f} ({html / plain:.2f}x)")
    print(f"sent as text: element kept well-formed {result['as_text_kept']}/{lines}, BLEU without tags ", end="")
    print(f"{result['bleu_as_text_without_tags']:.2f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, nargs="+", help="one or more: each judged on the same elements")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--train-src", required=True, help="pairs that give the aligner its statistics")
    parser.add_argument("--train-tgt", required=True)
    parser.add_argument("--train-pairs", type=int, default=20000)
    parser.add_argument("--lines", type=int, default=1000)
    parser.add_argument("--engine", default="auto")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--judges", type=int, default=3, help="eflomal runs on the outputs (it samples): their mean")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    sources, references = read(args.src, args.lines), read(args.ref, args.lines)
    stats = read(args.train_src, args.train_pairs), read(args.train_tgt, args.train_pairs)
    links = align_words(stats[0] + sources, stats[1] + references)[len(stats[0]) :]
    cases = tagged_cases(sources, references, links, args.seed)
    print(machine_line())
    runs = []
    for checkpoint in args.checkpoint:
        runs.append(measure(checkpoint, args, cases, sources, references, stats))
        report(runs[-1])
    if args.json:
        write_json(args.json, {"machine": machine_line(), "runs": runs})


if __name__ == "__main__":
    main()
