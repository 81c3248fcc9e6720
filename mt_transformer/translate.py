"""Translating lines of text: tokenize, batch by tokens (longest first), search, detokenize,
and put the results back in input order. Exactly one result per input line; an empty line
gives an empty translation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from tqdm import tqdm

from .batching import pad
from .beam_search import beam_search
from .corpus import normalize
from .greedy import greedy_search
from .masks import padding_mask
from .config import UserError
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    tokens: list[int]
    score: float
    log_prob: float


def source_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices of non-empty inputs, longest first, in batches of at most max_tokens source tokens
    (a single longer input gets a batch of its own)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    batches, current = [], []
    for i in order:
        longest = lengths[current[0]] + 1 if current else lengths[i] + 1
        if current and longest * (len(current) + 1) > max_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def translate_lines(
    model, tokenizer: Tokenizer, lines: list[str], device: torch.device, beam_size: int = 4,
    alpha: float = 0.6, max_len_a: float = 1.0, max_len_b: int = 50, n_best: int = 1,
    max_tokens: int = 8192, max_positions: int | None = None, progress: bool = False,
) -> list[list[Translation]]:
    """Translate `lines`; returns, per line, up to n_best translations, best first.

    max_positions: truncate longer inputs (learned position embeddings); None for no limit.
    """
    model.eval()
    ids = tokenizer.encode_src([normalize(line) for line in lines])
    if max_positions is not None:
        limit = max_positions - 1
        for i, sequence in enumerate(ids):
            if len(sequence) > limit:
                log.warning("line %d: %d subwords, truncated to %d (model.max_positions)", i + 1, len(sequence), limit)
                ids[i] = sequence[:limit]
    results: list[list[Translation]] = [[Translation("", [], 0.0, 0.0)] for _ in lines]
    batches = source_batches([len(s) for s in ids], max_tokens)
    with tqdm(total=sum(map(len, batches)), unit="sent", disable=not progress, leave=False) as bar:
        for batch in batches:
            src = pad([ids[i] for i in batch], suffix=[EOS_ID]).to(device)       # (batch, src_len)
            src_mask = padding_mask(src, PAD_ID)                                  # (batch, 1, 1, src_len)
            max_len = torch.tensor([int(max_len_a * len(ids[i]) + max_len_b) for i in batch])
            if beam_size == 1:
                hypotheses = [[h] for h in greedy_search(model, src, src_mask, max_len, BOS_ID, EOS_ID)]
            else:
                hypotheses = beam_search(model, src, src_mask, max_len, BOS_ID, EOS_ID, beam_size, alpha, n_best)
            for i, hyps in zip(batch, hypotheses):
                texts = tokenizer.decode_tgt([h.tokens for h in hyps])
                results[i] = [Translation(t, h.tokens, h.score, h.log_prob) for t, h in zip(texts, hyps)]
            bar.update(len(batch))
    return results


def load_translator(path: str, device: torch.device):
    """Model (eval mode, on device), tokenizer and metadata from a checkpoint or run directory."""
    from . import checkpoint
    from .model import Transformer

    directory = checkpoint.resolve(path)
    metadata = checkpoint.read_metadata(directory)
    try:
        model_args = metadata["config"]["model"]
        sizes = metadata["src_vocab_size"], metadata["tgt_vocab_size"]
        joint = metadata["joint_vocab"]
    except (KeyError, TypeError):
        raise UserError(f"{directory}/{checkpoint.CONFIG_FILE}: not an mt_transformer checkpoint config") from None
    tokenizer = Tokenizer(directory)
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != tuple(sizes):
        raise UserError(f"{directory}: the tokenizer has vocabularies of {tokenizer.src_vocab_size}/"
                        f"{tokenizer.tgt_vocab_size} pieces but the model was built for {sizes[0]}/{sizes[1]}")
    try:
        model = Transformer(sizes[0], sizes[1], share_vocab=joint, **model_args)
    except TypeError as error:
        raise UserError(f"{directory}/{checkpoint.CONFIG_FILE}: model settings not understood ({error})") from None
    checkpoint.load_weights(model, directory)
    return model.to(device).eval(), tokenizer, metadata
