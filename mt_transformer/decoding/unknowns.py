"""What a translation's <unk> subwords stand for: the source's own unknown spans.

A character the vocabulary cannot spell (without data.byte_fallback) is <unk> on both sides. A
translation never prints sentencepiece's "⁇" for it: each target <unk> takes the source span of
the unknown source piece it attends to most (OpenNMT's -replace_unk; Translator.cross_attention's
heads, those that give the model's alignments, of an ensemble's first model), so names, emoji
and symbols are copied through; CTranslate2 gives the same heads.
For inputs translated in parts the k-th target <unk> takes the k-th source span. A target <unk> with no source span to
take is left out.
"""

from __future__ import annotations

from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.special_tokens import UNK_ID


def unknown_fills(
    attend, tokenizer: Tokenizer, text: str, src_ids: list[int] | None, outputs, head: int = 0
) -> list[list[str]]:
    """For each output (a list of target ids), the source text of each of its <unk> subwords, in
    order. `text` is the source line as encoded; `src_ids` its ids when the model translated it
    whole (else None: the spans are taken in order). `attend(src_ids, outputs)`: each output's
    (target, source) cross-attention matrix (the translator's), or None where there is none."""
    holes = [[t for t, token in enumerate(ids) if token == UNK_ID] for ids in outputs]
    if not any(holes):
        return [[] for _ in outputs]
    spans = tokenizer.src_unknowns(text)  # (source position, text)
    if not spans:
        return [[] for _ in outputs]
    if attend is None or src_ids is None:
        return [[span for _, span in spans[: len(h)]] for h in holes]
    import torch  # the attention matrices are tensors

    with_holes = [k for k, h in enumerate(holes) if h]
    fills: list[list[str]] = [[] for _ in outputs]
    positions = torch.tensor([head + p for p, _ in spans])  # src_ids begin with `head` ids the text lacks
    for k, matrix in zip(with_holes, attend(src_ids, [outputs[k] for k in with_holes])):
        # row t is the step that wrote target piece t
        chosen = matrix[holes[k]][:, positions].argmax(dim=1).tolist()
        fills[k] = [spans[j][1] for j in chosen]
    return fills
