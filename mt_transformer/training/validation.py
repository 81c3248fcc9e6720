"""Validation during training: loss and perplexity of the valid set, and its greedy BLEU."""

from __future__ import annotations

import logging
import math

import numpy as np
import torch

from mt_transformer.config import Config, language_tag
from mt_transformer.data.batching import batch_loader, lengths, token_batches
from mt_transformer.data.language_codes import public_code
from mt_transformer.data.languages import LanguageScheme
from mt_transformer.decoding.translator import torch_translator, with_decode
from mt_transformer.devices import PRECISIONS, autocast
from mt_transformer.evaluation.scores import score
from mt_transformer.training.loss import blockwise_losses

log = logging.getLogger(__name__)


def validate(model, tokenizer, dataset, config: Config, device) -> dict:
    """Valid loss, perplexity and greedy BLEU; the model is left in training mode."""
    train = config.train
    metrics = validation_loss(
        model,
        dataset,
        train.max_tokens,
        config.data.max_len,
        train.label_smoothing,
        device,
        train.precision,
        config.model.source_tag_after_eos,
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
def validation_loss(
    model, dataset, max_tokens: int, max_len: int, smoothing: float, device, precision: str, tag_after_eos=False
) -> dict:
    """Label-smoothed loss and NLL per target token over valid pairs within max_len subwords
    (`tag_after_eos`: batching.encoder_input's)."""
    model.eval()
    src_lens, tgt_lens = lengths(dataset)
    keep = np.nonzero((src_lens <= max_len) & (tgt_lens <= max_len))[0]
    batches = [keep[b] for b in token_batches(src_lens[keep], tgt_lens[keep], max_tokens, shuffle=False)]
    total_loss = total_nll = 0.0
    tokens = 0
    for batch in batch_loader(dataset.select_columns(["src_ids", "tgt_ids"]), batches, tag_after_eos=tag_after_eos):
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
    (valid_bleu_xx, from the pairs whose source carries <2xx>, tokenized for xx), one with
    language tokens for several pairs that of each (valid_bleu_xx-yy, each pair's rows found by
    the tokens they begin with), and valid_bleu is their mean. train.valid_max_sentences N > 0
    takes the first N pairs (of each language or pair)."""
    bf16 = config.train.weights_dtype == "bf16"  # bf16 weights search in bf16
    decode = with_decode(config, beam_size=1, n_best=1, sampling=False, precision="bf16" if bf16 else None)
    translate = torch_translator(model, tokenizer, decode, device)
    limit = config.train.valid_max_sentences or None
    groups = _groups(translate.languages, dataset, config)
    groups = {name: (rows[:limit], leads) for name, (rows, leads) in groups.items() if rows}
    scores = {}
    for name, (rows, leads) in groups.items():
        pairs = dataset.select(rows)
        if leads is not None:
            translate.leads = leads
        hypotheses = [found[0].text for found in translate(pairs["src"][:])]
        language = translate.target_language if leads is not None else name
        scores[name] = score(hypotheses, pairs["tgt"][:], metrics=("bleu",), tgt_lang=language)["bleu"]
    if len(scores) == 1:
        return {"valid_bleu": next(iter(scores.values()))}
    return {"valid_bleu": sum(scores.values()) / len(scores)} | {f"valid_bleu_{lang}": b for lang, b in scores.items()}


def _groups(languages: LanguageScheme, dataset, config: Config) -> dict[str | None, tuple[list[int], tuple | None]]:
    """The valid rows to score apart, by name (the target language, or xx-yy), each with the
    language tokens to translate them with (None: the translator's own)."""
    if languages.tokens:
        codes = {i: public_code(code) for code, i in languages.tokens.items()}
        found: dict[tuple[int, int], list[int]] = {}
        for i, (src, tgt) in enumerate(zip(dataset["src_ids"][:], dataset["tgt_ids"][:])):
            found.setdefault((src[0], tgt[0]), []).append(i)
        return {f"{codes[s]}-{codes[t]}": (rows, ([s], [t])) for (s, t), rows in found.items()}
    if len(languages.tags) < 2:
        return {config.data.target_language: (list(range(len(dataset))), None)}
    firsts = [source.split(" ", 1)[0] for source in dataset["src"][:]]
    return {
        lang: ([i for i, first in enumerate(firsts) if first == language_tag(lang)], None) for lang in languages.tags
    }
