"""Teacher forcing: the log-probability a model gives each subword of given translations, the
reference an export is checked against and the cost mt-score and data.clean.scorers report."""

from __future__ import annotations

import torch

from mt_transformer.data.batching import collate
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import PAD_ID


@torch.inference_mode()
def teacher_forced_log_probs(
    model, sources: list[list[int]], targets: list[list[int]], device: torch.device, tag_after_eos: bool = False
) -> list[list[float]]:
    """log P(y_t | y_<t, x) of every target subword and of the EOS after it, per pair, in one
    batched pass (a model, or an Ensemble: its combined distribution, normalised as the searches
    normalise it); `tag_after_eos`: batching.encoder_input's."""
    batch = collate(sources, targets, tag_after_eos)
    src, tgt_in, tgt_out = batch.src.to(device), batch.tgt_in.to(device), batch.tgt_out.to(device)
    src_mask = padding_mask(src, PAD_ID)  # (batch, 1, 1, src_len)
    states, _ = model.decode(tgt_in, model.encode(src, src_mask), src_mask)  # (batch, tgt_len, d_model)
    log_probs = model.logits(states).float().log_softmax(dim=-1)  # (batch, tgt_len, vocab)
    picked = log_probs.gather(-1, tgt_out[..., None]).squeeze(-1).cpu()  # (batch, tgt_len)
    return [picked[row, : len(target) + 1].tolist() for row, target in enumerate(targets)]
