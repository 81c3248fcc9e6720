"""Translating lines of text: tokenize, batch by tokens (longest first), search, detokenize,
and put the results back in input order. Exactly one result per input line; an empty line
gives an empty translation, and a line too long for the model (or for memory) is translated
in parts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from tqdm import tqdm

from mt_transformer.data.batching import pad
from mt_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID
from mt_transformer.data.text import normalize
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.beam import beam_search
from mt_transformer.decoding.greedy import greedy_search
from mt_transformer.decoding.search import Hypothesis
from mt_transformer.devices import is_out_of_memory, release_memory
from mt_transformer.model.masks import padding_mask

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


SENTENCE_ENDS = (".", "!", "?", ";", ":", "。", "！", "？", "؟", "।")


def cut_points(pieces: list[str], limit: int) -> list[int]:
    """Where to cut a subword sequence into parts of at most `limit` (> 1) pieces.

    Within the last half of each window, prefer the end of a sentence, then the start of a word
    (a piece beginning with sentencepiece's "▁"), and cut at the limit only when neither exists.
    """
    cuts, start = [], 0
    while len(pieces) - start > limit:
        window = range(start + limit, start + limit // 2, -1)  # a cut at j ends the part before piece j
        cut = (
            next((j for j in window if pieces[j - 1].endswith(SENTENCE_ENDS)), None)
            or next((j for j in window if pieces[j].startswith("▁")), None)
            or start + limit
        )
        cuts.append(cut)
        start = cut
    return cuts


def split_at(sequence: list[int], cuts: list[int]) -> list[list[int]]:
    bounds = [0, *cuts, len(sequence)]
    return [sequence[a:b] for a, b in zip(bounds, bounds[1:])]


def join_hypotheses(parts: list[list[Hypothesis]]) -> list[Hypothesis]:
    """The k-th joined hypothesis concatenates the k-th of every part (or its last, if it has fewer)."""
    joined = []
    for k in range(max(len(p) for p in parts)):
        chosen = [p[min(k, len(p) - 1)] for p in parts]
        joined.append(
            Hypothesis(
                [t for h in chosen for t in h.tokens], sum(h.score for h in chosen), sum(h.log_prob for h in chosen)
            )
        )
    return joined


class Decoder:
    """Search over batches of subword sequences, surviving out-of-memory errors: a batch that does not
    fit is halved, and a single input that does not fit is translated in two parts."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        device: torch.device,
        beam_size: int,
        alpha: float,
        max_len_a: float,
        max_len_b: int,
        n_best: int,
        max_positions: int | None,
    ):
        self.model, self.tokenizer, self.device = model, tokenizer, device
        self.beam_size, self.alpha, self.n_best = beam_size, alpha, n_best
        self.max_len_a, self.max_len_b, self.max_positions = max_len_a, max_len_b, max_positions

    def search(self, sources: list[list[int]]) -> list[list[Hypothesis]]:
        src = pad(sources, suffix=[EOS_ID]).to(self.device)  # (batch, src_len)
        src_mask = padding_mask(src, PAD_ID)  # (batch, 1, 1, src_len)
        max_len = torch.tensor([int(self.max_len_a * len(s) + self.max_len_b) for s in sources])
        if self.max_positions is not None:  # learned positions: the decoder cannot go further
            max_len = max_len.clamp(max=self.max_positions - 1)
        if self.beam_size == 1:
            return [[h] for h in greedy_search(self.model, src, src_mask, max_len, BOS_ID, EOS_ID)]
        return beam_search(self.model, src, src_mask, max_len, BOS_ID, EOS_ID, self.beam_size, self.alpha, self.n_best)

    def __call__(self, sources: list[list[int]]) -> list[list[Hypothesis]]:
        try:
            return self.search(sources)
        except RuntimeError as error:  # torch.OutOfMemoryError is one
            if not is_out_of_memory(error):
                raise
        release_memory(self.device)
        if len(sources) > 1:
            log.warning(
                "out of memory translating %d sentences of up to %d subwords: halving the batch",
                len(sources),
                max(map(len, sources)),
            )
            half = len(sources) // 2
            return self(sources[:half]) + self(sources[half:])
        source = sources[0]
        if len(source) < 2:
            log.warning("out of memory translating a single subword: its translation is left empty")
            return [[Hypothesis([], 0.0, 0.0)]]
        log.warning("out of memory translating one input of %d subwords: translating it in two parts", len(source))
        parts = split_at(source, cut_points(self.tokenizer.src_pieces(source), (len(source) + 1) // 2))
        return [join_hypotheses([self([part])[0] for part in parts])]


def translate_lines(
    model,
    tokenizer: Tokenizer,
    lines: list[str],
    device: torch.device,
    beam_size: int = 4,
    alpha: float = 0.6,
    max_len_a: float = 1.0,
    max_len_b: int = 50,
    n_best: int = 1,
    max_tokens: int = 8192,
    max_input_len: int = 0,
    max_positions: int | None = None,
    progress: bool = False,
) -> list[list[Translation]]:
    """Translate `lines` with the PyTorch model; returns, per line, up to n_best translations, best first.

    An input longer than max_input_len subwords (0: no limit) is cut into parts at sentence or
    word boundaries; the parts are translated on their own and their translations joined.
    max_positions: the model's limit with learned position embeddings; None for sinusoidal.
    """
    model.eval()
    limit = max_input_len or None
    if max_positions is not None:
        limit = min(limit or max_positions - 1, max_positions - 1)
    search = Decoder(model, tokenizer, device, beam_size, alpha, max_len_a, max_len_b, n_best, max_positions)
    return translate_with(search, tokenizer, lines, max_tokens, limit, progress)


def translate_with(
    search, tokenizer: Tokenizer, lines: list[str], max_tokens: int, max_input_len: int | None, progress: bool = False
) -> list[list[Translation]]:
    """Tokenize, cut over-long inputs, batch longest first, run `search` (a callable from a list of
    subword-id sequences to their hypotheses: Decoder, or ctranslate2_engine.Ct2Search), join the
    parts, detokenize, and return the results in input order."""
    ids = tokenizer.encode_src([normalize(line) for line in lines])
    segments, owners = [], []  # the parts to translate, and the line each belongs to
    for line, sequence in enumerate(ids):
        parts = [sequence]
        if max_input_len and len(sequence) > max_input_len:
            parts = split_at(sequence, cut_points(tokenizer.src_pieces(sequence), max_input_len))
            log.warning(
                "line %d: %d subwords, more than %d: translated in %d parts",
                line + 1,
                len(sequence),
                max_input_len,
                len(parts),
            )
        segments += parts
        owners += [line] * len(parts)

    found: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in segments]  # empty inputs stay empty
    batches = source_batches([len(s) for s in segments], max_tokens)
    with tqdm(total=sum(map(len, batches)), unit="sent", disable=not progress, leave=False) as bar:
        for batch in batches:
            for i, hypotheses in zip(batch, search([segments[i] for i in batch])):
                found[i] = hypotheses
            bar.update(len(batch))

    per_line: list[list[list[Hypothesis]]] = [[] for _ in lines]
    for line, hypotheses in zip(owners, found):
        per_line[line].append(hypotheses)
    results = []
    for parts in per_line:
        hypotheses = parts[0] if len(parts) == 1 else join_hypotheses(parts)
        texts = tokenizer.decode_tgt([h.tokens for h in hypotheses])
        results.append([Translation(t, h.tokens, h.score, h.log_prob) for t, h in zip(texts, hypotheses)])
    return results
