"""The next-token log-probabilities of our searches (greedy, beam, sampling) with the rules
they share: never padding or the start token, EOS alone at the length limit, no repeated n-grams,
forced prefixes."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from mt_transformer.special_tokens import BOS_ID, PAD_ID


def forbid_all_but_eos(scores: torch.Tensor, rows: torch.Tensor, eos_id: int) -> None:
    """In the given rows (bool, (n,)) of scores (n, vocab), keep only EOS possible: used at the length limit."""
    eos = scores[:, eos_id].clone()
    scores.masked_fill_(rows[:, None], float("-inf"))
    scores[:, eos_id] = torch.where(rows, eos, scores[:, eos_id])


def repeated_ngrams(tokens: torch.Tensor, n: int, vocab: int) -> torch.Tensor | None:
    """The tokens that would repeat an n-gram already in each row (fairseq's no-repeat-ngram):
    (rows, vocab) bool, or None while the rows are shorter than n.

    tokens: (rows, length), the hypotheses so far (BOS first).
    """
    if tokens.size(1) < n:
        return None
    grams = tokens.unfold(1, n, 1)  # (rows, length - n + 1, n)
    prefix = tokens[:, tokens.size(1) - (n - 1) :]  # (rows, n - 1): what the next token would extend
    follows_prefix = (grams[:, :, : n - 1] == prefix[:, None, :]).all(dim=-1)  # (rows, length - n + 1)
    counts = torch.zeros(tokens.size(0), vocab, device=tokens.device)
    return counts.scatter_add_(1, grams[:, :, -1], follows_prefix.float()) > 0


def forbid_repeated_ngrams(scores: torch.Tensor, tokens: torch.Tensor, n: int) -> None:
    """Make impossible, in scores (rows, vocab), each token that would repeat an n-gram of its row
    of tokens (rows, length)."""
    banned = repeated_ngrams(tokens, n, scores.size(-1))
    if banned is not None:
        scores.masked_fill_(banned, float("-inf"))


def force_prefix(scores: torch.Tensor, prefix: torch.Tensor | None, step: int) -> None:
    """Where a row's forced target prefix (`prefix`: (rows, prefix_len) ids, -1 past its end) has
    a token at `step`, make every other token impossible in scores (rows, vocab)."""
    if prefix is None or step >= prefix.size(1):
        return
    forced = prefix[:, step, None] >= 0  # (rows, 1)
    index = prefix[:, step, None].clamp(min=0)  # (rows, 1)
    kept = scores.gather(1, index)  # the forced token's score, and any token's in rows without one
    scores.masked_fill_(forced, float("-inf"))
    scores.scatter_(1, index, torch.where(forced, kept, scores.gather(1, index)))


@functools.cache
def _never_output(device: torch.device) -> torch.Tensor:
    """The ids no search outputs, as an index on `device` (made once, not at every step)."""
    return torch.tensor([PAD_ID, BOS_ID], device=device)


def next_token_log_probs(
    project: Callable[[torch.Tensor], torch.Tensor],
    states: torch.Tensor,
    step: int,
    eos_id: int,
    history: torch.Tensor,
    no_repeat_ngram: int,
    at_limit: torch.Tensor | None,
    prefix: torch.Tensor | None,
) -> torch.Tensor:
    """Log-probabilities (rows, vocab) of each row's next token from the decoder `states`
    (rows, new_len, d_model), with the search's rules: never padding or the start token (fairseq
    and transformers' OPUS-MT models forbid padding too); no token repeating an n-gram of N =
    `no_repeat_ngram` in the row's `history` (rows, length); only EOS in the rows `at_limit`
    (bool, (rows,); None: no row at its limit); the forced `prefix` (rows, prefix_len) at `step`."""
    # one fused pass per row, which beats logsumexp's separate passes over the vocabulary
    log_probs = project(states[:, -1]).float().log_softmax(dim=-1)  # (rows, vocab)
    log_probs.index_fill_(1, _never_output(log_probs.device), float("-inf"))
    if no_repeat_ngram:
        forbid_repeated_ngrams(log_probs, history, no_repeat_ngram)
    if at_limit is not None:
        forbid_all_but_eos(log_probs, at_limit, eos_id)
    force_prefix(log_probs, prefix, step)
    return log_probs
