"""Greedy decoding with the key/value cache: one new position per step."""

from __future__ import annotations

import torch

from .beam_search import Hypothesis, forbid_all_but_eos


@torch.inference_mode()
def greedy_search(model, src: torch.Tensor, src_mask: torch.Tensor, max_len: torch.Tensor,
                  bos_id: int, eos_id: int) -> list[Hypothesis]:
    """Most probable next token at each step until EOS or max_len[i] tokens (then EOS is forced).

    src: (batch, src_len); src_mask: (batch, 1, 1, src_len); max_len: (batch,) output-length limits.
    """
    batch = src.size(0)
    memory = model.encode(src, src_mask)                                   # (batch, src_len, d_model)
    cache = model.new_cache()
    max_len = max_len.to(src.device)
    last = torch.full((batch, 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    log_prob = torch.zeros(batch, device=src.device)
    steps, shortest_limit = [], int(max_len.min())
    for step in range(int(max_len.max()) + 1):
        logits, _ = model.decode(last, memory, src_mask, cache)
        log_probs = torch.log_softmax(logits[:, -1].float(), dim=-1)      # (batch, vocab)
        if step >= shortest_limit:
            forbid_all_but_eos(log_probs, max_len <= step, eos_id)
        token_log_prob, token = log_probs.max(dim=-1)
        log_prob += token_log_prob.masked_fill(finished, 0.0)
        token = token.masked_fill(finished, eos_id)
        steps.append(token)
        finished |= token == eos_id
        if bool(finished.all()):
            break
        last = token[:, None]
    tokens = torch.stack(steps, dim=1).tolist()                          # (batch, steps)
    hypotheses = []
    for row, score in zip(tokens, log_prob.tolist()):
        row = row[: row.index(eos_id)] if eos_id in row else row
        hypotheses.append(Hypothesis(row, score, score))
    return hypotheses
