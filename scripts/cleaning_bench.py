"""data.clean against web-crawl noise: a clean corpus with the noise of a crawl added, each noisy
pair labelled with its kind, cleaned as mt-train cleans it; per kind the share caught, and the
share of the clean pairs kept, by the rules of form alone, with language identification, with
word translation too (the defaults), with model scoring where --scorers names checkpoints
(data.clean.scorers), and the speed; with --scale N, mt-clean's time and peak memory on N pairs.

    python3 scripts/cleaning_bench.py --corpus DIR/train --src de --tgt en --other OTHER/train.de --out runs/cleaning \
        [--scorers runs/noisy_de_en runs/noisy_en_de]

The noise, each kind 5% of the clean pairs (the clean ones stay in, in order, the noise spread
among them by a seeded draw):
- copy: the target is the source, untranslated
- language: the target is a sentence of --other (a third language, or the source's: another
  sentence in the wrong language, as a crawl's language mix-ups are)
- misaligned: the target of another pair, several lines away
- duplicate: a clean pair again
- boilerplate: a site's stock phrases on one side, a different sentence on the other each time
- long: 6 consecutive pairs glued into one, both sides
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections import Counter

import torch

from measure import machine, machine_line, markdown_table, peak_own_memory, write_json
from mt_transformer.config import CleanConfig
from mt_transformer.data import lexical
from mt_transformer.data.cleaning import REASONS, clean_pairs
from mt_transformer.data.corpus import TextPairs
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.scoring import PairCosts
from mt_transformer.files import write_text

DEFAULT_LINKS = lexical.LINKS
KINDS = ("copy", "language", "misaligned", "duplicate", "boilerplate", "long")
STOCK = [
    "Click here to read more",
    "All rights reserved",
    "Add to basket",
    "Home | About us | Contact",
    "Share this page on Facebook",
    "Subscribe to our newsletter",
    "Accept cookies",
    "Back to top",
]


def noisy_corpus(sources: list[str], targets: list[str], other: list[str], share: float, seed: int):
    """The clean pairs with each kind of noise added at `share` of their number: (pairs, labels)."""
    rng = random.Random(seed)
    n, count = len(sources), int(share * len(sources))
    noise = []
    for _ in range(count):
        i = rng.randrange(n)
        noise.append(("copy", sources[i], sources[i]))
        noise.append(("language", sources[i], rng.choice(other)))
        noise.append(("misaligned", sources[i], targets[(i + rng.randrange(5, 50)) % n]))
        noise.append(("duplicate", sources[i], targets[i]))
        j = rng.randrange(n - 6)
        noise.append(("long", " ".join(sources[j : j + 6]), " ".join(targets[j : j + 6])))
        phrase = rng.choice(STOCK)
        noise.append(("boilerplate", sources[i], phrase) if rng.random() < 0.5 else ("boilerplate", phrase, targets[i]))
    rows = [("clean", s, t) for s, t in zip(sources, targets)]
    for item in noise:
        rows.insert(rng.randrange(len(rows) + 1), item)
    return rows


def caught(rows, kept_pairs: set[tuple[str, str]], kept_twice: set[tuple[str, str]]) -> dict[str, float]:
    """Per kind, the share of its pairs the cleaning dropped; for clean pairs, the share kept. A
    duplicate counts as caught where its pair is not kept twice."""
    shares = {}
    for kind in ("clean", *KINDS):
        pairs = [(s, t) for k, s, t in rows if k == kind]
        if not pairs:
            continue
        if kind == "clean":
            shares[kind] = sum((s, t) in kept_pairs for s, t in pairs) / len(pairs)
        elif kind == "duplicate":  # caught where no more than one of the pair is kept
            shares[kind] = sum((s, t) not in kept_twice for s, t in pairs) / len(pairs)
        else:
            shares[kind] = sum((s, t) not in kept_pairs for s, t in pairs) / len(pairs)
    return shares


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", required=True, help="a clean corpus's prefix: PREFIX.SRC, PREFIX.TGT")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--other", required=True, help="sentences of another language than --tgt, one a line")
    parser.add_argument("--share", type=float, default=0.05, help="each kind of noise, as a share of the clean pairs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="a directory for the noisy corpus, the cleaned ones and the JSON")
    parser.add_argument("--scorers", nargs="+", default=[], help="data.clean.scorers: source to target [and back]")
    parser.add_argument("--score-drop", type=float, default=CleanConfig.score_drop, help="data.clean.score_drop")
    parser.add_argument(
        "--lexical", type=float, default=CleanConfig.lexical, help="data.clean.lexical of the last rows"
    )
    parser.add_argument(
        "--links",
        type=int,
        default=DEFAULT_LINKS,
        help="the word links of one part the word translation learns from (data/lexical.py): fewer, more parts",
    )
    parser.add_argument(
        "--scale", type=int, default=0, metavar="N", help="also mt-clean N pairs drawn from the noisy ones: peak memory"
    )
    args = parser.parse_args(argv)
    lexical.LINKS = args.links  # in this process only
    sources, targets = read_lines(f"{args.corpus}.{args.src}"), read_lines(f"{args.corpus}.{args.tgt}")
    rows = noisy_corpus(
        sources, targets, [line for line in read_lines(args.other) if line.strip()], args.share, args.seed
    )
    os.makedirs(args.out, exist_ok=True)
    noisy = os.path.join(args.out, "noisy")
    for side, lang in ((1, args.src), (2, args.tgt)):
        write_text(f"{noisy}.{lang}", "".join(row[side] + "\n" for row in rows))
    write_text(f"{noisy}.labels", "".join(row[0] + "\n" for row in rows))
    pairs = TextPairs(f"{noisy}.{args.src}", f"{noisy}.{args.tgt}")
    results, scorer = {}, None
    variants = [
        ("rules", CleanConfig(language_id=None, lexical=None)),  # neither language nor word translation
        ("with language_id", CleanConfig(lexical=None)),
        (
            "defaults" if (args.lexical, args.links) == (CleanConfig.lexical, DEFAULT_LINKS) else variant(args),
            CleanConfig(lexical=args.lexical),
        ),
    ]
    if args.scorers:
        scorer = PairCosts(torch.device("cpu")).opened(args.scorers, args.src, args.tgt)
        scoring = CleanConfig(lexical=args.lexical, scorers=tuple(args.scorers), score_drop=args.score_drop)
        variants.append(("with scorers", scoring))
    for name, settings in variants:
        out = os.path.join(args.out, name.replace(" ", "_"))
        report = clean_pairs(pairs, settings, args.src, args.tgt, out, scorer=scorer)
        kept = list(zip(read_lines(f"{out}.{args.src}"), read_lines(f"{out}.{args.tgt}")))
        counts: dict = {}
        for pair in kept:
            counts[pair] = counts.get(pair, 0) + 1
        twice = {pair for pair, n in counts.items() if n > 1}
        results[name] = {"shares": caught(rows, set(kept), twice), "report": report}
    print(f"# {machine_line()}")
    print(
        f"# {args.corpus}: {len(sources):,} clean pairs, {len(rows) - len(sources):,} noisy ({args.share:.0%} a kind)"
    )
    header = ["rules", "clean kept", *[f"{kind} caught" for kind in KINDS], "pairs/s"]
    table = [
        [name, *(f"{r['shares'][k]:.1%}" for k in ("clean", *KINDS)), f"{r['report']['pairs_per_second']:,}"]
        for name, r in results.items()
    ]
    print(markdown_table(header, table))
    for name, r in results.items():
        dropped = {reason: r["report"]["dropped"].get(reason, 0) for reason in REASONS[1:]}
        print(f"{name}: dropped by rule " + json.dumps({k: v for k, v in dropped.items() if v}))
    if args.scale:
        results["scale"] = at_scale(rows, args)
    write_json(os.path.join(args.out, "cleaning_bench.json"), {**machine(), "share": args.share, **results})
    return results


def variant(args) -> str:
    parts = [f"lexical {args.lexical}"] if args.lexical != CleanConfig.lexical else []
    return ", ".join(parts + ([f"{args.links:,} links a part"] if args.links != DEFAULT_LINKS else []))


def at_scale(rows, args) -> dict:
    """mt-clean (the defaults) in its own process on --scale pairs: the noisy rows over and over, each
    round's pairs ending in the round's number (so hardly any is a duplicate: the most hashes kept);
    its wall time and peak memory."""
    prefix = os.path.join(args.out, "scale")
    for side, lang in ((1, args.src), (2, args.tgt)):
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as f:
            for i in range(args.scale):
                turn = i // len(rows)
                f.write(rows[i % len(rows)][side] + (f" {turn}" if turn else "") + "\n")
    command = ["mt-clean", "--src", f"{prefix}.{args.src}", "--tgt", f"{prefix}.{args.tgt}"]
    command += ["--src-lang", args.src, "--tgt-lang", args.tgt, "-o", f"{prefix}-clean"]
    seconds, peak, own = peak_own_memory(command)
    found = {"pairs": args.scale, "seconds": round(seconds, 1), "peak_rss_mib": round(peak), "own_mib": round(own)}
    found["pairs_per_second"] = round(args.scale / seconds)
    found["shares"] = caught_at_scale(rows, args.scale, (f"{prefix}-clean.{args.src}", f"{prefix}-clean.{args.tgt}"))
    print(f"mt-clean of {args.scale:,} pairs: {seconds:.0f} s, peak RSS {peak:,.0f} MiB ({own:,.0f} MiB its own)")
    print("caught: " + ", ".join(f"{kind} {share:.1%}" for kind, share in found["shares"].items()))
    return found


def caught_at_scale(rows, count: int, kept_paths: tuple[str, str]) -> dict[str, float]:
    """caught() over each round of the rows in --scale, the cleaned lines of each told by the
    round's number at their end (they come in order); the shares weighed by each kind's rows."""
    totals, sizes = dict.fromkeys(("clean", *KINDS), 0.0), dict.fromkeys(("clean", *KINDS), 0)

    def judge(turn: int, pairs: list[tuple[str, str]]) -> None:
        these = rows[: count - turn * len(rows)]
        twice = {pair for pair, n in Counter(pairs).items() if n > 1}
        rows_of = Counter(kind for kind, _, _ in these)
        for kind, share in caught(these, set(pairs), twice).items():
            totals[kind], sizes[kind] = totals[kind] + share * rows_of[kind], sizes[kind] + rows_of[kind]

    def stripped(pair: tuple[str, str], turn: int) -> tuple[str, str] | None:
        suffix = f" {turn}" if turn else ""
        s, t = (side[: len(side) - len(suffix)] for side in pair)
        return (s, t) if pair == (s + suffix, t + suffix) else None

    turn, pairs, noisy = 0, [], {(s, t) for _, s, t in rows}
    with open(kept_paths[0], encoding="utf-8") as src, open(kept_paths[1], encoding="utf-8") as tgt:
        for pair in zip((line[:-1] for line in src), (line[:-1] for line in tgt)):
            if stripped(pair, turn + 1) in noisy:  # the next round's first kept line
                judge(turn, pairs)
                turn, pairs = turn + 1, []
            pairs.append(stripped(pair, turn) or pair)  # (a line the stage repaired: as it is, not found)
    for later in range(turn, -(-count // len(rows))):  # the last rounds, and any that kept nothing
        judge(later, pairs if later == turn else [])
    return {kind: totals[kind] / sizes[kind] for kind in totals if sizes[kind]}


if __name__ == "__main__":
    main()
