"""What every search returns and the rules they share: a hypothesis, the GNMT length penalty,
and forcing EOS at the length limit."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log_prob / length_penalty
    log_prob: float  # sum of token log-probabilities, EOS included


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al., 2016): lp(Y) = ((5 + |Y|) / 6) ^ alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def forbid_all_but_eos(scores: torch.Tensor, rows: torch.Tensor, eos_id: int) -> None:
    """In the given rows (bool, (n,)) of scores (n, vocab), keep only EOS possible: used at the length limit."""
    eos = scores[:, eos_id].clone()
    scores.masked_fill_(rows[:, None], float("-inf"))
    scores[:, eos_id] = torch.where(rows, eos, scores[:, eos_id])


def output_limit(source_len: int, decode, max_positions: int | None = None) -> int:
    """The most target subwords (before EOS) for a source of `source_len`: decode.max_len_a *
    source_len + decode.max_len_b, and fewer than a position table of max_positions holds."""
    limit = int(decode.max_len_a * source_len + decode.max_len_b)
    return min(limit, max_positions - 1) if max_positions is not None else limit
