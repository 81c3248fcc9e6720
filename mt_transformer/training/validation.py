"""Validation during training: loss and perplexity of the valid set, and its greedy BLEU."""

from __future__ import annotations

import math

import numpy as np
import torch

from mt_transformer.data.batching import batch_loader, lengths, token_batches
from mt_transformer.decoding.translator import translate_lines
from mt_transformer.evaluation.scores import score
from mt_transformer.training.loss import label_smoothed_loss


@torch.no_grad()
def validation_loss(model, dataset, max_tokens: int, max_len: int, smoothing: float, device, autocast) -> dict:
    """Label-smoothed loss and NLL per target token over valid pairs within max_len subwords."""
    model.eval()
    src_lens, tgt_lens = lengths(dataset)
    keep = np.nonzero((src_lens <= max_len) & (tgt_lens <= max_len))[0]
    batches = [keep[b] for b in token_batches(src_lens[keep], tgt_lens[keep], max_tokens, shuffle=False)]
    total_loss = total_nll = 0.0
    tokens = 0
    for batch in batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches):
        batch = batch.to(device)
        with autocast:
            logits = model.project(model(batch.src, batch.tgt_in))
        total_loss += float(label_smoothed_loss(logits, batch.tgt_out, smoothing))
        total_nll += float(label_smoothed_loss(logits, batch.tgt_out, 0.0))
        tokens += batch.target_tokens
    tokens = max(tokens, 1)
    return {
        "valid_loss": total_loss / tokens,
        "valid_nll": total_nll / tokens,
        "valid_ppl": math.exp(min(total_nll / tokens, 100.0)),
    }


def validation_bleu(
    model, tokenizer, dataset, max_sentences: int, decode: dict, max_len: int, device, tgt_lang: str | None = None
) -> float:
    if max_sentences:
        dataset = dataset.select(range(min(max_sentences, len(dataset))))
    sources, references = list(dataset["src"]), list(dataset["tgt"])
    translations = translate_lines(
        model,
        tokenizer,
        sources,
        device,
        beam_size=1,
        max_len_a=decode["max_len_a"],
        max_len_b=decode["max_len_b"],
        max_tokens=decode["max_tokens"],
        max_input_len=decode["max_input_len"] or max_len,
    )
    return score([t[0].text for t in translations], references, metrics=("bleu",), tgt_lang=tgt_lang)["bleu"]
