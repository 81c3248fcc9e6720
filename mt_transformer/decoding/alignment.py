"""What the decoder looked at: cross-attention weights of a translation, the hard word alignments
taken from them, and their heatmaps.

The weights come from teacher-forcing the finished translation through the model once
(`Transformer.decode(..., need_weights=True)`), so they are exactly those of the steps that
produced it. Row t is the step that predicted target piece t (the last row predicts EOS);
column s is source piece s (the last column is the source EOS).
"""

from __future__ import annotations

import os
from typing import Protocol

import numpy
import torch

from mt_transformer.data.batching import encoder_input
from mt_transformer.data.tokenizer import WORD_START, Tokenizer
from mt_transformer.files import save_png
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, PAD_ID


@torch.no_grad()
def cross_attention(
    model, src_ids: list[int], hypotheses: list[list[int]], device: torch.device, tag_after_eos: bool = False
) -> list[torch.Tensor]:
    """Weights (layers, heads, tgt_len + 1, src_len + 1) of each hypothesis for one source sentence
    (+1: the EOS of each side), the columns in the order of src_ids then EOS whatever the order the
    encoder read them in (`tag_after_eos`: batching.encoder_input's); the source is encoded once."""
    model.eval()
    src = torch.tensor([encoder_input(src_ids, tag_after_eos)], device=device)  # (1, src_len + 1)
    src_mask = padding_mask(src, PAD_ID)  # (1, 1, 1, src_len + 1)
    memory = model.encode(src, src_mask)  # (1, src_len + 1, d_model)
    longest = max(len(ids) for ids in hypotheses)
    # shorter hypotheses padded at the end: under the causal mask no earlier row sees the padding
    tgt_in = torch.tensor(
        [[BOS_ID] + ids + [PAD_ID] * (longest - len(ids)) for ids in hypotheses], device=device
    )  # (hyps, longest + 1)
    n = len(hypotheses)
    _, weights = model.decode(tgt_in, memory.expand(n, -1, -1), src_mask.expand(n, -1, -1, -1), need_weights=True)
    stacked = torch.stack(weights, 1).float().cpu()  # (hyps, layers, heads, longest+1, src+1)
    if tag_after_eos:  # the language token read last: its column back to the front
        stacked = stacked.roll(1, dims=-1)
    return [stacked[i, :, :, : len(ids) + 1] for i, ids in enumerate(hypotheses)]


def select(weights: torch.Tensor, layer: int = -1, head: int | None = None, first: int | None = None) -> torch.Tensor:
    """One (tgt, src) matrix of weights (layers, heads, tgt, src): `layer`'s `head`, or the mean of
    its `first` heads (None: all)."""
    chosen = weights[layer]  # (heads, tgt, src)
    return chosen[:first].mean(0) if head is None else chosen[head]


def first_pieces(pieces: list[str]) -> list[int]:
    """The positions of the pieces that begin a word: the first, and each marked as a word start."""
    return [k for k, piece in enumerate(pieces) if k == 0 or piece.startswith(WORD_START)]


def word_weights(matrix: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str]) -> numpy.ndarray:
    """(tgt_words, src_words) from one (tgt + 1, src + 1) attention matrix: the pieces' weights summed
    over each source word, averaged over each target word's pieces (EOS left out)."""
    src_starts, tgt_starts = first_pieces(src_pieces), first_pieces(tgt_pieces)
    pieces = matrix[: len(tgt_pieces), : len(src_pieces)].float().numpy()  # (tgt_pieces, src_pieces)
    # a word's pieces stand together: sums over runs of columns, then of rows over their counts
    per_src_word = numpy.add.reduceat(pieces, src_starts, axis=1)  # (tgt_pieces, src_words)
    counts = numpy.diff(tgt_starts + [len(tgt_pieces)])[:, None]
    return numpy.add.reduceat(per_src_word, tgt_starts, axis=0) / counts  # (tgt_words, src_words)


def word_alignment(
    matrix: torch.Tensor, src_pieces: list[str], tgt_pieces: list[str], unaligned: bool = False
) -> list[tuple[int, int]]:
    """Hard alignment from one (tgt + 1, src + 1) attention matrix: best_sources of its word_weights."""
    if not tgt_pieces or not src_pieces:
        return []
    return best_sources(word_weights(matrix, src_pieces, tgt_pieces), unaligned)


def best_sources(words: numpy.ndarray, unaligned: bool = False) -> list[tuple[int, int]]:
    """For every target word of a (tgt_words, src_words) word_weights matrix, the source word it
    attends to most. Pairs (source word, target word), 0-based, one per target word, but
    (`unaligned`) none for a word that gives the rest of its row (the EOS) more than any source word."""
    pairs = [(int(s), t) for t, s in enumerate(words.argmax(1).tolist())]
    if unaligned:  # the weight on neither word nor language token: the EOS's
        rest = 1.0 - words.sum(1)  # (tgt_words,)
        pairs = [(s, t) for s, t in pairs if words[t, s] >= rest[t]]
    return pairs


def source_cover(words: numpy.ndarray, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """For each source word of a word_weights matrix that no pair takes, (it, the target word that
    attends to it most): where an inline element's words drew no target word (a neighbour took
    their weight), markup keeps them."""
    taken = {s for s, _ in pairs}
    return [(s, int(t)) for s, t in enumerate(words.argmax(0).tolist()) if s not in taken]


def format_alignment(pairs: list[tuple[int, int]]) -> str:
    """The Pharaoh format of fast_align and Moses: `0-0 1-2 2-1` (source-target)."""
    return " ".join(f"{s}-{t}" for s, t in pairs)


def inspect_translations(
    translator,
    lines: list[str],
    results,
    heatmap_dir: str | None = None,
    which: str = "",
    first_index: int = 0,
    layer: int | None = None,
    head: int | None = None,
) -> list[list[str]]:
    """For `mt-translate`: each hypothesis's word alignment (Pharaoh format) by decoder `layer`'s
    `head` (translator.cross_attention's), and with `heatmap_dir` a heatmap of each line's best
    translation, written to heatmap_dir/NNNN.png; `which`: the layer and heads it is."""
    if heatmap_dir:
        os.makedirs(heatmap_dir, exist_ok=True)
    source, output = (len(h) for h in translator.leads)
    alignments = []
    for index, (line, src_ids, translations) in enumerate(zip(lines, translator.source_ids(lines), results)):
        outputs = [t.tokens for t in translations]
        found = aligned_words(translator, [src_ids] * len(outputs), outputs, one_source(translator, layer, head))
        alignments.append([format_alignment(pairs) for pairs, _, _ in found])
        if heatmap_dir and found and found[0][2] is not None:
            attention_heatmap(
                found[0][2][output:, source:],  # (target, source) without the language tokens
                translator.tokenizer.src_pieces(src_ids)[source:],
                translator.tokenizer.tgt_pieces(outputs[0])[output:],
                os.path.join(heatmap_dir, f"{first_index + index:04d}.png"),
                f"cross-attention, {which}\n{shorten(line, 90)}",
            )
    return alignments


def attention_heatmap(matrix, src_pieces: list[str], tgt_pieces: list[str], path: str, title: str) -> None:
    """Target pieces (rows) against source pieces (columns), EOS on both, labelled, as PNG."""
    src_labels, tgt_labels = src_pieces + ["</s>"], tgt_pieces + ["</s>"]
    # about a third of an inch per label, so 9-point labels never overlap
    width = min(max(6.0, 3 + 0.32 * len(src_labels)), 40)
    height = min(max(4.0, 2 + 0.3 * len(tgt_labels)), 40)
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    ax = figure.subplots()
    image = ax.imshow(matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(src_labels)), src_labels, rotation=90, fontsize=9)
    ax.set_yticks(range(len(tgt_labels)), tgt_labels, fontsize=9)
    ax.set_xlabel("source")
    ax.set_ylabel("translation")
    ax.set_title(title, fontsize=10, loc="left")
    figure.colorbar(image, ax=ax, shrink=0.8, label="attention weight")
    save_png(figure, path)


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def one_source(translator, layer: int | None = None, head: int | None = None):
    """aligned_words' `attend` where every pair has the same source (the hypotheses of one line):
    the source encoded once, decoder `layer`'s `head` (translator.cross_attention's)."""
    return lambda sources, outputs: translator.cross_attention(sources[0], outputs, layer, head)


class Aligning(Protocol):
    """What aligned_words reads of a translator (decoding/translator.Translator has it all)."""

    leads: tuple[list[int], list[int]]  # the language tokens each side begins with
    alignment_step: int  # 0: a target piece's row is the step that writes it; 1: the next, which reads it
    leaves_unaligned: bool  # a model taught to leave words unaligned (train.guided_alignment)
    tokenizer: Tokenizer

    def attention_of(self, sources: list[list[int]], outputs: list[list[int]]) -> list[torch.Tensor]: ...


def aligned_words(
    translator: Aligning,
    sources: list[list[int]],
    outputs: list[list[int]],
    attend=None,
    known=None,
    cover_source=False,
) -> list[tuple[list[tuple[int, int]], list[tuple[int, int]], torch.Tensor | None]]:
    """Per (source, output) pair (sources as translator.source_ids gives them, outputs as the search
    wrote them): its word alignment (word_alignment's pairs, the language tokens of both sides left
    out), with `cover_source` source_cover's pairs (else []), and the (target + 1, source + 1)
    attention they come from; ([], [], None) for an empty side. `known`: per pair, its attention
    where the search gave it already (Translation.attention), or None; `attend(sources, outputs)`
    gives the others, by default translator.attention_of (one engine call for all of them where
    CTranslate2 runs)."""
    source, output = (len(lead) for lead in translator.leads)
    step = translator.alignment_step  # each piece's row: the step that writes it, or the next
    unaligned = translator.leaves_unaligned
    found: list = [([], [], None) for _ in outputs]
    kept = [k for k, (src, out) in enumerate(zip(sources, outputs)) if src[source:] and out[output:]]
    matrices = {k: known[k] for k in kept if known is not None and known[k] is not None}
    wanted = [k for k in kept if k not in matrices]
    attend = attend or translator.attention_of
    if wanted:
        matrices.update(zip(wanted, attend([sources[k] for k in wanted], [outputs[k] for k in wanted])))
    for k in kept:
        src_pieces = translator.tokenizer.src_pieces(sources[k])[source:]
        tgt_pieces = translator.tokenizer.tgt_pieces(outputs[k])[output:]
        matrix = matrices[k][output:, source:]
        rows = matrix[step:]
        if len(rows) < len(tgt_pieces):  # a length limit ended it before the step after its last piece
            rows = torch.cat([rows, matrix[-1:].expand(len(tgt_pieces) - len(rows), -1)])
        words = word_weights(rows, src_pieces, tgt_pieces)  # (target words, source words)
        pairs = best_sources(words, unaligned)
        found[k] = (pairs, source_cover(words, pairs) if cover_source else [], matrices[k])
    return found
