"""The evaluation of lexically constrained decoding in docs/techniques.md, as Post & Vilar (2018) and
Hu et al. (2019) run it: each test sentence gets 1-2 phrases of its reference that the
unconstrained translation misses, and BLEU, chrF, the share of translations holding every
phrase, and sentences/s are compared with and without them, at each beam size.

    python3 scripts/constrained_eval.py --checkpoint runs/small_cpu/avg3 --src test.de --ref test.en \
        --beams 4 8 --write-constraints constraints.tsv

The phrases (one or two words of the reference, of at least 4 letters, absent from the
unconstrained translation) are drawn with a fixed seed; --write-constraints saves them in the
format of `mt-translate --constraints`.
"""

from __future__ import annotations

import argparse
import json
import random
import re

from measure import machine, machine_line, texts, timed, write_json
from mt_transformer.data.text import read_lines
from mt_transformer.decoding.engines import open_translator
from mt_transformer.evaluation.scores import score
from mt_transformer.files import write_text


def reference_phrases(reference: str, translation: str, rng: random.Random) -> list[str]:
    """1-2 phrases of the reference (a word, or two words) that the translation lacks."""
    words = re.findall(r"[\w'-]+", reference)
    have = set(re.findall(r"[\w'-]+", translation))
    missing = [i for i, w in enumerate(words) if len(w) >= 4 and w not in have]
    rng.shuffle(missing)
    phrases = []
    for i in missing[: rng.choice([1, 2])]:
        two = i + 1 < len(words) and rng.random() < 0.3
        phrases.append(" ".join(words[i : i + 2]) if two else words[i])
    return phrases


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--beams", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--write-constraints", metavar="FILE")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)

    sources, references = read_lines(args.src), read_lines(args.ref)
    print(f"# {machine_line()}")
    include, rows = None, []
    for beam in args.beams:
        translate = open_translator(args.checkpoint, "torch", "cpu", beam_size=beam)
        plain, plain_seconds = timed(texts, translate, sources)
        if include is None:  # drawn once, against the first beam's translations
            rng = random.Random(args.seed)
            include = [reference_phrases(r, t, rng) for r, t in zip(references, plain)]
            if args.write_constraints:
                write_text(args.write_constraints, "".join("\t".join(p) + "\n" for p in include))
        constrained, seconds = timed(texts, translate, sources, constraints=(include, [[] for _ in sources]))
        held = sum(all(p in t for p in phrases) for phrases, t in zip(include, constrained))
        row = {
            "beam": beam,
            "phrases": sum(map(len, include)),
            "sentences_with_phrases": sum(bool(p) for p in include),
            "unconstrained": {m: score(plain, references)[m] for m in ("bleu", "chrf")},
            "constrained": {m: score(constrained, references)[m] for m in ("bleu", "chrf")},
            "all_phrases_held": f"{held}/{len(sources)}",
            "sentences_per_s": {
                "unconstrained": round(len(sources) / plain_seconds, 1),
                "constrained": round(len(sources) / seconds, 1),
            },
            "speed_ratio": round(plain_seconds / seconds, 3),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        write_json(args.json, {"machine": machine(), "checkpoint": args.checkpoint, "rows": rows})
    return rows


if __name__ == "__main__":
    main()
