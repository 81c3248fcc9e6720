"""Sampling: each translation drawn token by token from the model's distribution, optionally
reshaped by a temperature and cut to the top k tokens or to the nucleus (top p), as for
back-translation, where varied outputs teach more than the single best one."""

from __future__ import annotations

import torch

from mt_transformer.decoding.greedy import greedy_search
from mt_transformer.decoding.search import Hypothesis, length_penalty


class Sampler:
    """Draws one next token per row of logits, from a generator seeded once: the same seed and
    the same batches draw the same tokens."""

    def __init__(self, topk: int, topp: float, temperature: float, seed: int, device: torch.device):
        self.topk, self.topp, self.temperature = topk, topp, temperature
        self.generator = torch.Generator(device=device).manual_seed(seed)

    def __call__(self, logits: torch.Tensor) -> torch.Tensor:
        """logits: (rows, vocab), or log-probabilities (the same draws), -inf where a token is
        forbidden; returns (rows,) token ids."""
        scores = logits / self.temperature
        if 0 < self.topk < scores.size(-1):
            kth_best = scores.topk(self.topk, dim=-1).values[:, -1:]  # (rows, 1)
            scores = scores.masked_fill(scores < kth_best, float("-inf"))
        if self.topp < 1.0:
            ordered, order = scores.sort(dim=-1, descending=True)
            probs = ordered.softmax(dim=-1)
            # a token stays if the more probable ones hold less than p: the first always stays
            beyond = probs.cumsum(dim=-1) - probs >= self.topp
            scores = scores.scatter(1, order, ordered.masked_fill(beyond, float("-inf")))
        return torch.multinomial(scores.softmax(dim=-1), 1, generator=self.generator).squeeze(1)


@torch.inference_mode()
def sample(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: torch.Tensor,
    bos_id: int,
    eos_id: int,
    *,
    sampler: Sampler,
    n: int,
    alpha: float,
    no_repeat_ngram: int = 0,
    prefix: torch.Tensor | None = None,
) -> list[list[Hypothesis]]:
    """`n` samples of each sentence, best first by the beam's length-normalised score.

    src: (batch, src_len); src_mask: (batch, 1, 1, src_len); max_len: (batch,) output-length limits.
    """
    rows = greedy_search(
        model,
        src.repeat_interleave(n, dim=0),  # (batch * n, src_len): sentence i's draws are rows i*n .. i*n+n-1
        src_mask.repeat_interleave(n, dim=0),
        max_len.repeat_interleave(n),
        bos_id,
        eos_id,
        pick=sampler,
        no_repeat_ngram=no_repeat_ngram,
        prefix=None if prefix is None else prefix.repeat_interleave(n, dim=0),
    )
    found = []
    for i in range(src.size(0)):
        draws = [
            Hypothesis(h.tokens, h.log_prob / length_penalty(len(h.tokens) + 1, alpha), h.log_prob)
            for h in rows[i * n : (i + 1) * n]
        ]
        found.append(sorted(draws, key=lambda h: h.score, reverse=True))
    return found
