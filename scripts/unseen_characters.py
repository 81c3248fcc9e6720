"""The data.byte_fallback measurement of docs/techniques.md: test sentences with characters inserted
that the training data never had (emoji, CJK, symbols, names with rare letters), translated by
each checkpoint; the share of lines whose inserted characters all come out in the translation.

    python3 scripts/unseen_characters.py --train corpus/train.de corpus/train.en --src corpus/test.de \
        --checkpoints runs/no_bytes runs/bytes

Each line gets one mark (in turn from the list below) after a word chosen with a fixed seed.
Only marks with characters (after sentencepiece's NFKC normalization) that the training files
lack are used, and those characters are the ones that must come out.
"""

from __future__ import annotations

import argparse
import json
import random
import unicodedata

from measure import machine_line
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.engines import open_translator

MARKS = ["😀", "北京", "©", "Þórður", "🚲", "東京", "→", "Nguyễn", "🎉", "漢字", "♥", "Łódź", "Jiří", "🙂"]


def unseen(mark: str, seen: set[str]) -> str:
    """The characters of `mark` that training never had."""
    return "".join(ch for ch in unicodedata.normalize("NFKC", mark) if ch not in seen and not ch.isspace())


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--train", nargs="+", required=True, help="the training files of both sides")
    parser.add_argument("--src", required=True)
    parser.add_argument("--checkpoints", nargs="+", required=True)
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)

    seen = set()
    for path in args.train:
        for line in read_lines(path):
            seen.update(unicodedata.normalize("NFKC", line))
    marks = [m for m in MARKS if unseen(m, seen)]
    rng = random.Random(args.seed)
    lines, wanted = [], []
    for i, line in enumerate(read_lines(args.src)):
        mark = marks[i % len(marks)]
        words = line.split()
        at = rng.randrange(len(words) + 1)
        lines.append(" ".join(words[:at] + [mark] + words[at:]))
        wanted.append(unseen(mark, seen))
    shown = ", ".join(f"{m} ({unseen(m, seen)})" for m in marks)
    print(f"# {machine_line()}; the marks and the characters of each that training lacks: {shown}")
    found = []
    for checkpoint in args.checkpoints:
        translate = open_translator(checkpoint, "torch", "cpu", beam_size=args.beam)
        results = translate(lines)
        kept = [all(ch in r[0].text for ch in chars) for r, chars in zip(results, wanted)]
        by_kind = {}
        for mark in marks:
            rows = [k for k, line in zip(kept, lines) if mark in line]
            by_kind[mark] = f"{sum(rows)}/{len(rows)}"
        row = {
            "checkpoint": checkpoint,
            "lines": len(lines),
            "characters_kept": round(sum(kept) / len(kept), 4),
            "by_mark": by_kind,
            "lines_with_unknowns": sum(r[0].unknowns > 0 for r in results),
            "unknown_mark_printed": sum("\u2047" in r[0].text for r in results),
        }
        print(json.dumps(row, ensure_ascii=False), flush=True)
        found.append(row)
        for line, result in list(zip(lines, results))[:3]:
            print(f"#   {line}\n#   -> {result[0].text}")
    return found


if __name__ == "__main__":
    main()
