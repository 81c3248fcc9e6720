"""The model's score of given translations: log P(target | source) by teacher forcing, the sum
over the target's subwords and its EOS, as fairseq's --score-reference and marian-scorer give it.

Data cleaning (data.clean.scorers, through PairCosts), quality estimation and contrastive
evaluation score with it (mt-score). The translator's settings apply as in translation: its
engine, ensemble, precision, token budget and target-language tag.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from mt_transformer import checkpoint
from mt_transformer.data.budgets import budget_batches
from mt_transformer.devices import autocast, is_out_of_memory, release_memory
from mt_transformer.errors import UserError
from mt_transformer.evaluation.teacher_forcing import teacher_forced_log_probs

log = logging.getLogger(__name__)


@dataclass
class LineScore:
    token_log_probs: list[float]  # one per target subword, then EOS

    @property
    def log_prob(self) -> float:
        return sum(self.token_log_probs)

    @property
    def per_token(self) -> float:
        """The log-probability per token (EOS counted): comparable across lengths."""
        return self.log_prob / len(self.token_log_probs)


def score_lines(
    translator, sources: list[str], targets: list[str], first_line: int = 0, progress=None
) -> list[LineScore]:
    """The score of each target line as the translation of its source line, in input order.
    `first_line`: the 0-based line number of the first pair, for messages; progress(n): n more pairs scored."""
    if len(sources) != len(targets):
        raise ValueError("one target per source")
    src_ids, tgt_ids = translator.source_ids(sources), translator.target_ids(targets)
    limit = translator.max_positions
    for line, (s, t) in enumerate(zip(src_ids, tgt_ids), start=first_line + 1):
        if limit is not None and max(len(s), len(t)) + 1 > limit:
            raise UserError(
                f"line {line}: {max(len(s), len(t))} subwords, more than the model's {limit - 1} positions hold"
            )
    return score_ids(translator, src_ids, tgt_ids, progress)


def score_ids(translator, src_ids: list[list[int]], tgt_ids: list[list[int]], progress=None) -> list[LineScore]:
    """score_lines of subword ids (each pair within the model's positions), in input order."""
    if translator.model is None:
        return [LineScore(scores) for scores in _ctranslate2_scores(translator, src_ids, tgt_ids)]
    order = sorted(range(len(src_ids)), key=lambda i: -max(len(src_ids[i]), len(tgt_ids[i])))
    sizes = [max(len(src_ids[i]), len(tgt_ids[i])) + 1 for i in order]
    found: list[list[float]] = [[] for _ in src_ids]
    for batch in budget_batches(order, sizes, translator.decode.max_tokens):
        scores = _scores_surviving_oom(translator, [src_ids[i] for i in batch], [tgt_ids[i] for i in batch])
        for i, row in zip(batch, scores):
            found[i] = row
        if progress:
            progress(len(batch))
    return [LineScore(scores) for scores in found]


def _scores_surviving_oom(translator, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
    """teacher_forced_log_probs of a batch, halved for as long as it does not fit in memory."""
    try:
        with autocast(translator.device, translator.runtime.precision):
            model, legacy = translator.search.runnable(), translator.config.model.source_tag_after_eos
            return teacher_forced_log_probs(model, sources, targets, translator.device, legacy)
    except RuntimeError as error:  # torch.OutOfMemoryError is one
        if not is_out_of_memory(error) or len(sources) == 1:
            raise
    release_memory(translator.device)
    log.warning("out of memory scoring %d sentence pairs: halving the batch", len(sources))
    half = len(sources) // 2
    return _scores_surviving_oom(translator, sources[:half], targets[:half]) + _scores_surviving_oom(
        translator, sources[half:], targets[half:]
    )


def _ctranslate2_scores(translator, sources: list[list[int]], targets: list[list[int]]) -> list[list[float]]:
    tokenizer = translator.tokenizer
    results = translator.search.translator.score_batch(
        [tokenizer.src_pieces(s) for s in sources],
        [tokenizer.tgt_pieces(t) for t in targets],
        max_batch_size=translator.decode.max_tokens,
        batch_type="tokens",
    )
    return [list(result.log_probs) for result in results]


@dataclass(frozen=True)
class PairCosts:
    """data.clean.scorers as the cleaning stage (data/cleaning.py) calls them: each pair's cost,
    lower for a likelier translation. One model: its cross-entropy per target token, H(t|s). Two,
    source to target and target to source: their dual conditional cross-entropy
    |H(t|s) - H(s|t)| + (H(t|s) + H(s|t)) / 2 (Junczys-Dowmunt, 2018), high where either finds the
    pair unlikely or the two disagree. A pair longer than a model's positions costs infinity."""

    device: torch.device
    threads: int = 0

    @staticmethod
    def identity(paths) -> list[str]:
        """What the cleaned pairs' cache key holds of the models: their files, not only their paths."""
        return [checkpoint.identity(path) for path in paths]

    def opened(self, paths, src_lang: str, tgt_lang: str) -> Callable[[list[str], list[str]], np.ndarray]:
        from mt_transformer.decoding.engines import open_translator

        directions = ((src_lang, tgt_lang), (tgt_lang, src_lang))
        translators = [
            open_translator(path, "auto", self.device, threads=self.threads, src_lang=a, tgt_lang=b)
            for path, (a, b) in zip(paths, directions)
        ]

        def costs(sources: list[str], targets: list[str]) -> np.ndarray:
            forward = _cross_entropies(translators[0], sources, targets)  # [pairs]
            if len(translators) == 1:
                return forward
            backward = _cross_entropies(translators[1], targets, sources)  # [pairs]
            with np.errstate(invalid="ignore"):  # inf - inf: a pair too long for both
                dual = np.abs(forward - backward) + (forward + backward) / 2
            return np.where(np.isfinite(forward) & np.isfinite(backward), dual, np.inf)

        return costs


def _cross_entropies(translator, sources: list[str], targets: list[str]) -> np.ndarray:
    """-log P(target | source) per target token (EOS counted) of each pair; inf where a side
    does not fit the model's positions."""
    src_ids, tgt_ids = translator.source_ids(sources), translator.target_ids(targets)
    limit = translator.max_positions
    fits = [i for i, (s, t) in enumerate(zip(src_ids, tgt_ids)) if limit is None or max(len(s), len(t)) < limit]
    found = np.full(len(sources), np.inf)
    scores = score_ids(translator, [src_ids[i] for i in fits], [tgt_ids[i] for i in fits])
    found[fits] = [-score.per_token for score in scores]
    return found
