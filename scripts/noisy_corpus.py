"""The corpus-filtering measurement of docs/techniques.md: a parallel corpus with a share of its
target lines shuffled against their sources, and the filter that catches them by dual
conditional cross-entropy (Junczys-Dowmunt, 2018) from the scores of `mt-score`.

    python3 scripts/noisy_corpus.py make --corpus DIR/train --src de --tgt en --share 0.2 --out noisy/train
    mt-score --checkpoint runs/noisy_de_en --src noisy/train.de --tgt noisy/train.en -o de_en.scores
    mt-score --checkpoint runs/noisy_en_de --src noisy/train.en --tgt noisy/train.de -o en_de.scores
    python3 scripts/noisy_corpus.py filter --corpus noisy/train --src de --tgt en \
        --scores de_en.scores en_de.scores --drop 0.2 --out filtered/train

`make` writes OUT.{src,tgt} and OUT.shuffled (1 on each line whose target was moved). `filter`
ranks the pairs by |H_a - H_b| + (H_a + H_b) / 2, H the per-token cross-entropies of the two
directions (with one scores file: H_a alone), drops the worst --drop share, writes the rest,
and reports the precision and recall of the dropped lines against OUT.shuffled.
"""

from __future__ import annotations

import argparse
import json
import random

from mt_transformer.data.text import read_lines
from mt_transformer.files import write_text


def write_lines(path: str, lines: list[str]) -> None:
    write_text(path, "".join(line + "\n" for line in lines))


def make(args) -> None:
    sources = read_lines(f"{args.corpus}.{args.src}")
    targets = read_lines(f"{args.corpus}.{args.tgt}")
    rng = random.Random(args.seed)
    chosen = sorted(rng.sample(range(len(targets)), int(args.share * len(targets))))
    moved = chosen[:]
    while any(a == b for a, b in zip(chosen, moved)):  # a derangement: no chosen line keeps its own target
        rng.shuffle(moved)
    noisy = targets[:]
    for a, b in zip(chosen, moved):
        noisy[a] = targets[b]
    flags = ["0"] * len(targets)
    for a in chosen:
        flags[a] = "1"
    write_lines(f"{args.out}.{args.src}", sources)
    write_lines(f"{args.out}.{args.tgt}", noisy)
    write_lines(f"{args.out}.shuffled", flags)
    print(json.dumps({"pairs": len(targets), "shuffled": len(chosen)}))


def cross_entropies(path: str) -> list[float]:
    """Per-token cross-entropy of each line of an mt-score output (TOTAL<TAB>PER_TOKEN)."""
    return [-float(line.split("\t")[1]) for line in read_lines(path)]


def filter_corpus(args) -> None:
    entropies = [cross_entropies(path) for path in args.scores]
    if len(entropies) == 2:
        cost = [abs(a - b) + (a + b) / 2 for a, b in zip(*entropies)]
    else:
        cost = entropies[0]
    order = sorted(range(len(cost)), key=lambda i: cost[i], reverse=True)
    dropped = set(order[: int(args.drop * len(cost))])
    sources = read_lines(f"{args.corpus}.{args.src}")
    targets = read_lines(f"{args.corpus}.{args.tgt}")
    kept = [i for i in range(len(sources)) if i not in dropped]
    write_lines(f"{args.out}.{args.src}", [sources[i] for i in kept])
    write_lines(f"{args.out}.{args.tgt}", [targets[i] for i in kept])
    shuffled = {i for i, flag in enumerate(read_lines(f"{args.corpus}.shuffled")) if flag == "1"}
    caught = len(dropped & shuffled)
    print(
        json.dumps(
            {
                "rule": "dual conditional cross-entropy" if len(entropies) == 2 else "per-token cross-entropy",
                "pairs": len(cost),
                "dropped": len(dropped),
                "shuffled": len(shuffled),
                "precision": round(caught / max(len(dropped), 1), 4),
                "recall": round(caught / max(len(shuffled), 1), 4),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("make", "filter"):
        command = commands.add_parser(name)
        command.add_argument("--corpus", required=True, help="file prefix: PREFIX.SRC, PREFIX.TGT")
        command.add_argument("--src", required=True)
        command.add_argument("--tgt", required=True)
        command.add_argument("--out", required=True, help="file prefix of what it writes")
    commands.choices["make"].add_argument("--share", type=float, default=0.2)
    commands.choices["make"].add_argument("--seed", type=int, default=1)
    commands.choices["filter"].add_argument("--scores", nargs="+", required=True, help="one or two mt-score outputs")
    commands.choices["filter"].add_argument("--drop", type=float, default=0.2)
    args = parser.parse_args()
    make(args) if args.command == "make" else filter_corpus(args)


if __name__ == "__main__":
    main()
