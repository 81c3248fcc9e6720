"""What every search returns and the limits they share: a hypothesis, the GNMT length penalty,
and the most target subwords a source may get. The next-token rules the PyTorch searches apply at
each step are next_token.py's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS and EOS
    score: float  # log_prob / length_penalty
    log_prob: float  # sum of token log-probabilities, EOS included
    unmet: int = 0  # lexical constraints: the phrases to include that it lacks
    attention: torch.Tensor | None = None  # (len(tokens), source) cross-attention, where the engine gave it


def length_penalty(length: int, alpha: float) -> float:
    """GNMT (Wu et al., 2016): lp(Y) = ((5 + |Y|) / 6) ^ alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def output_limit(source_len: int, decode, max_positions: int | None = None) -> int:
    """The most target subwords (before EOS) for a source of `source_len`: decode.max_len_a *
    source_len + decode.max_len_b, and fewer than a position table of max_positions holds."""
    limit = int(decode.max_len_a * source_len + decode.max_len_b)
    return min(limit, max_positions - 1) if max_positions is not None else limit


def output_limits(
    sources: list[list[int]], decode, max_positions: int | None = None, prefixes: list[list[int]] | None = None
) -> list[int]:
    """output_limit of each source, raised to the length of its forced prefix: a prefix is never cut."""
    limits = [output_limit(len(s), decode, max_positions) for s in sources]
    if prefixes is None:
        return limits
    return [max(limit, len(p)) for limit, p in zip(limits, prefixes)]
