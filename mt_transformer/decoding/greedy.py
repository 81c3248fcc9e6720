"""Greedy decoding with the key/value cache: one new position per step; finished sentences
leave the batch, so later steps run on fewer rows."""

from __future__ import annotations

import torch

from mt_transformer.decoding import stopping
from mt_transformer.decoding.next_token import next_token_log_probs
from mt_transformer.decoding.search import Hypothesis


@torch.inference_mode()
def greedy_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: torch.Tensor,
    bos_id: int,
    eos_id: int,
    *,
    pick=None,
    no_repeat_ngram: int = 0,
    prefix: torch.Tensor | None = None,
) -> list[Hypothesis]:
    """Most probable next token at each step until EOS or max_len[i] tokens (then EOS is forced).
    `pick(log_probs)` chooses the next tokens instead (decoding/sampling.py draws them); the
    log-probabilities are the model's either way. `no_repeat_ngram` N > 0: no n-gram of N tokens
    twice in an output. `prefix` (batch, prefix_len), -1 past each row's end: forced first tokens.

    src: (batch, src_len); src_mask: (batch, 1, 1, src_len); max_len: (batch,) output-length limits.
    """
    batch, device = src.size(0), src.device
    memory = model.encode(src, src_mask)  # (batch, src_len, d_model)
    cache, project = model.new_cache(), model.logits
    max_len = max_len.to(device)
    sentence = torch.arange(batch, device=device)  # original index of each live row
    last = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)
    history = last  # (live, 1 + step): BOS and the tokens so far, grown only for no_repeat_ngram
    log_prob = torch.zeros(batch, device=device)
    tokens: list[list[int]] = [[] for _ in range(batch)]
    owners = list(range(batch))  # `sentence` on the host, where the bookkeeping reads it
    shortest_limit = int(max_len.min())
    for step in range(int(max_len.max()) + 1):
        stopping.check()  # a caller that gave up on this translation (decoding/stopping.py)
        states, _ = model.decode(last, memory, src_mask, cache)
        memory = None  # from now on the cache holds the cross-attention keys and values
        at_limit = max_len <= step if step >= shortest_limit else None
        row_prefix = None if prefix is None else prefix[sentence]
        log_probs = next_token_log_probs(project, states, step, eos_id, history, no_repeat_ngram, at_limit, row_prefix)
        if pick is None:
            token_log_prob, token = log_probs.max(dim=-1)  # (live,)
        else:
            token = pick(log_probs)  # (live,); log-probs are the logits shifted per row: same draws
            token_log_prob = log_probs.gather(1, token[:, None]).squeeze(1)
        log_prob.index_add_(0, sentence, token_log_prob)
        picked = token.tolist()  # the step's one host sync
        for owner, t in zip(owners, picked):
            tokens[owner].append(t)
        done = [t == eos_id for t in picked]
        if all(done):
            break
        last = token[:, None]
        if no_repeat_ngram:
            history = torch.cat([history, last], dim=1)
        if any(done):  # finished sentences leave the batch
            kept = [i for i, d in enumerate(done) if not d]
            owners = [owners[i] for i in kept]
            keep = torch.tensor(kept, device=device)
            sentence, max_len, last, src_mask = sentence[keep], max_len[keep], last[keep], src_mask[keep]
            history = history[keep]
            cache.select(keep, sentences=keep)
            shortest_limit = int(max_len.min())
    return [
        Hypothesis(row[:-1] if row and row[-1] == eos_id else row, score, score)
        for row, score in zip(tokens, log_prob.tolist())
    ]
