"""Validation during training: loss and perplexity of the valid set, and its greedy BLEU."""

from __future__ import annotations

import math

import numpy as np
import torch

from mt_transformer.config import Config
from mt_transformer.data.batching import batch_loader, lengths, token_batches
from mt_transformer.decoding.translator import torch_translator, with_decode
from mt_transformer.evaluation.scores import score
from mt_transformer.training.loss import blockwise_losses
from mt_transformer.training.step import PRECISIONS, autocast


@torch.no_grad()
def validation_loss(model, dataset, max_tokens: int, max_len: int, smoothing: float, device, precision: str) -> dict:
    """Label-smoothed loss and NLL per target token over valid pairs within max_len subwords."""
    model.eval()
    src_lens, tgt_lens = lengths(dataset)
    keep = np.nonzero((src_lens <= max_len) & (tgt_lens <= max_len))[0]
    batches = [keep[b] for b in token_batches(src_lens[keep], tgt_lens[keep], max_tokens, shuffle=False)]
    total_loss = total_nll = 0.0
    tokens = 0
    for batch in batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches):
        batch = batch.to(device)
        with autocast(device, precision):
            states = model(batch.src, batch.tgt_in)  # (batch, tgt_len, d_model)
        loss, nll = blockwise_losses(states, model.output.weight, batch.tgt_out, smoothing, PRECISIONS[precision])
        total_loss += loss
        total_nll += nll
        tokens += batch.target_tokens
    tokens = max(tokens, 1)
    return {
        "valid_loss": total_loss / tokens,
        "valid_nll": total_nll / tokens,
        "valid_ppl": math.exp(min(total_nll / tokens, 100.0)),
    }


def validation_bleu(model, tokenizer, dataset, config: Config, device) -> float:
    """Greedy BLEU of the first train.valid_max_sentences valid pairs (0: all), with the decode
    settings of the config otherwise."""
    max_sentences = config.train.valid_max_sentences
    if max_sentences:
        dataset = dataset.select(range(min(max_sentences, len(dataset))))
    translate = torch_translator(model, tokenizer, with_decode(config, beam_size=1, n_best=1, sampling=False), device)
    translations = translate(list(dataset["src"]))
    hypotheses = [t[0].text for t in translations]
    return score(hypotheses, list(dataset["tgt"]), metrics=("bleu",), tgt_lang=config.data.target_language)["bleu"]
