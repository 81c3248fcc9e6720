"""Several models with one tokenizer, searched as one: each step combines the members'
next-token distributions, by default the mean of their log-probabilities (the search then
normalises it: a geometric mean), or the mean of their probabilities (fairseq's ensemble).

The ensemble offers the model's decoding interface (encode, new_cache, decode, logits), so
greedy, beam and sampling search run it unchanged, with every member's key/value cache.
"""

from __future__ import annotations

import math

import torch

MODES = ("logprob", "prob")


class EnsembleCache:
    """One decoder cache per member, reordered together."""

    def __init__(self, caches: list):
        self.caches = caches

    def select(self, rows: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        for cache in self.caches:
            cache.select(rows, sentences)


class Ensemble(torch.nn.Module):
    def __init__(self, models: list[torch.nn.Module], mode: str = "logprob"):
        super().__init__()
        self.members = torch.nn.ModuleList(models)
        self.mode = mode
        self.widths = [model.output.in_features for model in models]  # each member's d_model

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> list[torch.Tensor]:
        """Each member's memory (batch, src_len, its d_model)."""
        return [model.encode(src, src_mask) for model in self.members]

    def new_cache(self) -> EnsembleCache:
        return EnsembleCache([model.new_cache() for model in self.members])

    def decode(self, tgt_in, memory, src_mask, cache: EnsembleCache | None = None, need_weights: bool = False):
        """The members' decoder states side by side, (batch, tgt_len, sum of the members' d_model),
        and the first member's cross-attention weights."""
        states, weights = [], None
        for i, model in enumerate(self.members):
            member_memory = None if memory is None else memory[i]  # None: the caches hold it
            member_cache = None if cache is None else cache.caches[i]
            member_states, member_weights = model.decode(tgt_in, member_memory, src_mask, member_cache, need_weights)
            states.append(member_states)
            if i == 0:
                weights = member_weights
        return torch.cat(states, dim=-1), weights

    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """(..., sum of d_model) -> the ensemble's next-token logits (..., vocab): log-scores whose
        softmax is the combined distribution (the mean log-probability is not normalized; the
        mean probability comes out normalized), so the searches treat them as a model's logits."""
        log_probs = torch.stack(
            [
                model.logits(part).float().log_softmax(dim=-1)
                for model, part in zip(self.members, states.split(self.widths, dim=-1))
            ]
        )  # (members, ..., vocab)
        if self.mode == "prob":
            return torch.logsumexp(log_probs, dim=0) - math.log(len(self.members))
        return log_probs.mean(dim=0)
