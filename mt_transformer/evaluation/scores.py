"""Scores with sacreBLEU on detokenized text, with the signatures sacreBLEU prints: corpus
scores, sentence scores, and paired significance tests between two systems."""

from __future__ import annotations

import logging

from sacrebleu.metrics import BLEU, CHRF, TER
from sacrebleu.significance import PairedTest

from mt_transformer.errors import UserError

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


def bleu_metric(tgt_lang: str | None, effective_order: bool = False) -> BLEU:
    """sacreBLEU's BLEU with the tokenizer its command line picks for the target language: 13a in
    general, `zh` for Chinese, MeCab for Japanese and Korean. Without MeCab installed (the
    `sacrebleu[ja]` / `sacrebleu[ko]` extras), Japanese falls back to characters and Korean
    (which has spaces) to 13a; the signature says which was used. Sentence BLEU wants
    `effective_order`: a single sentence often lacks matches of some n-gram order."""
    try:
        return BLEU(trg_lang=tgt_lang or "", effective_order=effective_order)
    except RuntimeError:  # MeCab missing
        fallback = "char" if tgt_lang == "ja" else "13a"
        logging.getLogger(__name__).warning(
            "BLEU for %s: MeCab is not installed (pip install sacrebleu[%s]); tokenizing with %s instead",
            tgt_lang,
            tgt_lang,
            fallback,
        )
        return BLEU(tokenize=fallback, effective_order=effective_order)


def metric(name: str, tgt_lang: str | None = None, sentence_level: bool = False):
    return bleu_metric(tgt_lang, effective_order=sentence_level) if name == "bleu" else METRICS[name]()


def score(hypotheses: list[str], references: list[str], metrics=("bleu", "chrf"), tgt_lang: str | None = None) -> dict:
    """{"bleu": 34.1, "chrf": ..., "signature": {"bleu": "nrefs:1|case:mixed|...", ...}}.
    `tgt_lang` (an ISO code such as "zh") chooses BLEU's tokenizer (see `bleu_metric`)."""
    if len(hypotheses) != len(references):
        raise UserError(f"hypotheses have {len(hypotheses)} lines but references have {len(references)}")
    result, signatures = {}, {}
    for name in metrics:
        scorer = metric(name, tgt_lang)
        result[name] = round(scorer.corpus_score(hypotheses, [references]).score, 2)
        signatures[name] = str(scorer.get_signature())
    result["signature"] = signatures
    return result


def format_scores(result: dict) -> str:
    """One line per metric: `BLEU = 34.10  (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0)`."""
    return "\n".join(
        f"{name.upper()} = {result[name]:.2f}  ({result['signature'][name]})" for name in result if name != "signature"
    )


def sentence_scores(
    hypotheses: list[str], references: list[str], metrics=("bleu", "chrf"), tgt_lang: str | None = None
) -> list[dict]:
    """Each sentence's scores, [{"bleu": 41.2, "chrf": 60.3}, ...] (sentence BLEU with effective order)."""
    scorers = {name: metric(name, tgt_lang, sentence_level=True) for name in metrics}
    return [
        {name: round(scorer.sentence_score(hypothesis, [reference]).score, 2) for name, scorer in scorers.items()}
        for hypothesis, reference in zip(hypotheses, references)
    ]


TESTS = {"bootstrap": ("bs", 1000), "randomization": ("ar", 10000)}  # sacreBLEU's defaults


def paired_significance(
    hypotheses: list[str],
    baseline: list[str],
    references: list[str],
    metrics=("bleu", "chrf"),
    tgt_lang: str | None = None,
    tests=("bootstrap", "randomization"),
) -> dict:
    """Is `hypotheses` better or worse than `baseline` by more than chance? sacreBLEU's paired tests
    (as `sacrebleu REF -i BASELINE HYP --paired-bs` / `--paired-ar` compute them, seed 12345):

    {"bleu": {"system": 35.1, "baseline": 34.0, "bootstrap_p": 0.02, "randomization_p": 0.03,
              "system_mean": 35.1, "system_ci": 1.2}, ..., "signature": {"bleu_bootstrap": ..., ...}}
    """
    for other in (baseline, references):
        if len(other) != len(hypotheses):
            raise UserError(f"hypotheses have {len(hypotheses)} lines but another file has {len(other)}")
    result, signatures = {name: {} for name in metrics}, {}
    if hypotheses == baseline:  # sacreBLEU's bootstrap says p = 0.001 for two identical systems
        scores = score(hypotheses, references, metrics, tgt_lang)
        for name in metrics:
            result[name] = {"system": scores[name], "baseline": scores[name], **{f"{t}_p": 1.0 for t in tests}}
        result["signature"] = {f"{name}_{t}": scores["signature"][name] for name in metrics for t in tests}
        return result
    for test in tests:  # all metrics in one PairedTest, as the sacrebleu command runs them
        test_type, samples = TESTS[test]
        signature, table = PairedTest(
            [("baseline", baseline), ("system", hypotheses)],
            {name: metric(name, tgt_lang) for name in metrics},
            [references],
            test_type=test_type,
            n_samples=samples,
        )()
        for name, key in zip(metrics, signature):  # key: the metric's display name, e.g. "chrF2"
            base, system = table[key]
            entry = result[name]
            entry.update(
                {"system": round(system.score, 2), "baseline": round(base.score, 2), f"{test}_p": system.p_value}
            )
            if test == "bootstrap":
                entry.update({"system_mean": round(float(system.mean), 2), "system_ci": round(float(system.ci), 2)})
            signatures[f"{name}_{test}"] = str(signature[key])
    result["signature"] = signatures
    return result


def format_significance(result: dict, system: str, baseline: str, level: float = 0.05) -> str:
    """One line per metric: the two scores, the difference, the p-values and the verdict at `level`."""
    lines = []
    for name, entry in result.items():
        if name == "signature":
            continue
        tests = [t for t in TESTS if f"{t}_p" in entry]
        p_values = ", ".join(f"{t} p = {entry[f'{t}_p']:.4f}" for t in tests)
        significant = all(entry[f"{t}_p"] < level for t in tests)
        verdict = f"significant at p < {level}" if significant else f"not significant at p < {level}"
        lines.append(
            f"{name.upper()} {system} = {entry['system']:.2f}  {baseline} = {entry['baseline']:.2f}  "
            f"difference {entry['system'] - entry['baseline']:+.2f}  ({p_values}): {verdict}"
        )
    return "\n".join(lines)
