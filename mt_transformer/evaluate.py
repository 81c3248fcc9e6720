"""Corpus scores with sacreBLEU on detokenized text, with the signatures sacreBLEU prints."""

from __future__ import annotations

import logging

from sacrebleu.metrics import BLEU, CHRF, TER

from .config import UserError
from .corpus import invalid_utf8_line

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


def read_lines(path: str) -> list[str]:
    """Lines of a UTF-8 file without their line endings (a final newline adds no line)."""
    try:
        with open(path, encoding="utf-8", newline="") as f:
            text = f.read()
    except FileNotFoundError:
        raise UserError(f"{path}: file not found") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: line {invalid_utf8_line(path)} is not valid UTF-8") from None
    text = text.removeprefix("\ufeff")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def bleu_metric(tgt_lang: str | None) -> BLEU:
    """sacreBLEU's BLEU with the tokenizer its command line picks for the target language: 13a in
    general, `zh` for Chinese, MeCab for Japanese and Korean. Without MeCab installed (the
    `sacrebleu[ja]` / `sacrebleu[ko]` extras), Japanese falls back to characters and Korean
    (which has spaces) to 13a; the signature says which was used."""
    try:
        return BLEU(trg_lang=tgt_lang or "")
    except RuntimeError:  # MeCab missing
        fallback = "char" if tgt_lang == "ja" else "13a"
        logging.getLogger(__name__).warning("BLEU for %s: MeCab is not installed (pip install sacrebleu[%s]); "
                                            "tokenizing with %s instead", tgt_lang, tgt_lang, fallback)
        return BLEU(tokenize=fallback)


def score(hypotheses: list[str], references: list[str], metrics=("bleu", "chrf"), tgt_lang: str | None = None) -> dict:
    """{"bleu": 34.1, "chrf": ..., "signature": {"bleu": "nrefs:1|case:mixed|...", ...}}.
    `tgt_lang` (an ISO code such as "zh") chooses BLEU's tokenizer (see `bleu_metric`)."""
    if len(hypotheses) != len(references):
        raise UserError(f"hypotheses have {len(hypotheses)} lines but references have {len(references)}")
    result, signatures = {}, {}
    for name in metrics:
        metric = bleu_metric(tgt_lang) if name == "bleu" else METRICS[name]()
        result[name] = round(metric.corpus_score(hypotheses, [references]).score, 2)
        signatures[name] = str(metric.get_signature())
    result["signature"] = signatures
    return result


def format_scores(result: dict) -> str:
    """One line per metric: `BLEU = 34.10  (nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0)`."""
    return "\n".join(f"{name.upper()} = {result[name]:.2f}  ({result['signature'][name]})"
                     for name in result if name != "signature")
