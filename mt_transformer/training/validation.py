"""Validation during training: loss and perplexity of the valid set, and its greedy BLEU."""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from mt_transformer.config import Config, language_tag
from mt_transformer.data.batching import batch_loader, lengths, token_batches
from mt_transformer.decoding.translator import torch_translator, with_decode
from mt_transformer.devices import PRECISIONS, autocast
from mt_transformer.evaluation.scores import score
from mt_transformer.training.loss import blockwise_losses

log = logging.getLogger(__name__)


def validate(model, tokenizer, dataset, config: Config, device) -> dict:
    """Valid loss, perplexity and greedy BLEU; the model is left in training mode."""
    train = config.train
    metrics = validation_loss(
        model, dataset, train.max_tokens, config.data.max_len, train.label_smoothing, device, train.precision
    )
    metrics |= validation_bleu(model, tokenizer, dataset, config, device)
    model.train()
    return metrics


def log_validation(step: int, metrics: dict) -> None:
    each = "".join(f"  {key[len('valid_bleu_') :]} {value:.2f}" for key, value in metrics.items() if "bleu_" in key)
    log.info(
        "step %d  valid loss %.3f  ppl %.2f  BLEU %.2f%s",
        step,
        metrics["valid_loss"],
        metrics["valid_ppl"],
        metrics["valid_bleu"],
        each,
    )


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
        weight, bias, dtype = model.output.weight, model.output_bias(), PRECISIONS[precision]
        loss, nll = blockwise_losses(states, weight, batch.tgt_out, smoothing, dtype, bias=bias)
        total_loss += loss
        total_nll += nll
        tokens += batch.target_tokens
    tokens = max(tokens, 1)
    return {
        "valid_loss": total_loss / tokens,
        "valid_nll": total_nll / tokens,
        "valid_ppl": math.exp(min(total_nll / tokens, 100.0)),
    }


def validation_bleu(model, tokenizer, dataset, config: Config, device) -> dict[str, float]:
    """Greedy BLEU of the valid pairs, with the decode settings of the config otherwise:
    {"valid_bleu": ...}. A run with target tags for several languages also gets the BLEU of each
    (valid_bleu_xx, from the pairs whose source carries <2xx>, tokenized for xx), and valid_bleu
    is their mean. train.valid_max_sentences N > 0 takes the first N pairs (of each language)."""
    languages = config.data.target_languages if config.data.target_tags else []
    if len(languages) < 2:
        groups = {config.data.target_language: list(range(len(dataset)))}
    else:
        heads = [source.split(" ", 1)[0] for source in dataset["src"]]
        groups = {
            language: [i for i, head in enumerate(heads) if head == language_tag(language)] for language in languages
        }
    limit = config.train.valid_max_sentences or None
    groups = {language: rows[:limit] for language, rows in groups.items() if rows}
    decode = with_decode(config, beam_size=1, n_best=1, sampling=False)
    translate = torch_translator(model, tokenizer, decode, device)
    scores = {}
    for language, rows in groups.items():
        pairs = dataset.select(rows)
        hypotheses = [found[0].text for found in translate(list(pairs["src"]))]
        scores[language] = score(hypotheses, list(pairs["tgt"]), metrics=("bleu",), tgt_lang=language)["bleu"]
    if len(scores) == 1:
        return {"valid_bleu": next(iter(scores.values()))}
    return {"valid_bleu": sum(scores.values()) / len(scores)} | {f"valid_bleu_{lang}": b for lang, b in scores.items()}
