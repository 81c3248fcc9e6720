"""A test set as people type it (mt-eval --variants): its sources changed by each of data.augment's
modifiers (data/augment.py), translated, and each scored against the matching references, so
that a model's drop on input unlike its clean test sentences shows as a number:

    clean             the test set as it is
    upper_case        sources and references in capitals
    title_case        every word of both capitalised
    remove_end_punct  both without their final punctuation
    typos             15% of the source's words misspelt (seeded), the references as they are

Beside each BLEU its case-insensitive score: the case variants' drop is counted on it, since a
model that writes "Ein Mann" for "A MAN" has translated the words (the issue with capitals is
that they often are not)."""

from __future__ import annotations

import random
from collections.abc import Callable

from mt_transformer.data import augment
from mt_transformer.evaluation.scores import score

VARIANTS = ("clean", "upper_case", "title_case", "remove_end_punct", "typos")
CASE_VARIANTS = ("upper_case", "title_case")


def variant(name: str, sources: list[str], references: list[str], seed: int = 1) -> tuple[list[str], list[str]]:
    """The sources and references of variant `name`."""
    if name == "clean":
        return list(sources), list(references)
    if name == "upper_case":
        return [augment.upper_case(s) for s in sources], [augment.upper_case(r) for r in references]
    if name == "title_case":
        return [augment.title_case(s) for s in sources], [augment.title_case(r) for r in references]
    if name == "remove_end_punct":
        return [augment.remove_end_punct(s) for s in sources], [augment.remove_end_punct(r) for r in references]
    if name == "typos":
        rng = random.Random(seed)
        return [augment.typos(s, rng) for s in sources], list(references)
    raise ValueError(f"no variant {name!r}")


def evaluate_variants(
    translate: Callable[[list[str]], list[str]],
    sources: list[str],
    references: list[str],
    tgt_lang: str | None,
    metrics=("bleu", "chrf"),
    seed: int = 1,
) -> list[dict]:
    """Per variant: its scores, the case-insensitive BLEU, and the drop from clean (case-insensitive
    for the case variants). `translate`: source lines to their translations."""
    rows, clean = [], None
    for name in VARIANTS:
        changed, wanted = variant(name, sources, references, seed)
        hypotheses = translate(changed)
        row = {"variant": name, **score(hypotheses, wanted, metrics, tgt_lang)}
        if "bleu" in metrics:
            lowered = score([h.lower() for h in hypotheses], [r.lower() for r in wanted], ["bleu"], tgt_lang)
            row["bleu_case_insensitive"] = lowered["bleu"]
            if clean is None:
                clean = row
            kind = "bleu_case_insensitive" if name in CASE_VARIANTS else "bleu"
            row["drop"] = round(row[kind] - clean[kind], 2)
        rows.append(row)
    return rows


def format_variants(rows: list[dict], metrics=("bleu", "chrf")) -> str:
    names = [m for m in metrics if m in rows[0]]
    header = ["variant", *(m.upper() for m in names)] + (["BLEU (case-insensitive)", "drop"] if "bleu" in names else [])
    lines = ["\t".join(header)]
    for row in rows:
        cells = [row["variant"], *(f"{row[m]:.2f}" for m in names)]
        if "bleu" in names:
            drop = "" if row["variant"] == "clean" else f"{row['drop']:+.2f}"
            cells += [f"{row['bleu_case_insensitive']:.2f}", drop]
        lines.append("\t".join(cells))
    return "\n".join(lines)
