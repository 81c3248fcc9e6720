"""`POST /v1/translate`: what mt-translate offers, over HTTP. The request and answer are pydantic
models, so the framework checks the body and the OpenAPI schema describes it.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from mt_transformer.serve.api import ApiError, Limits, check_text, parse_translate
from mt_transformer.serve.models import Item, Options, Result

MAX_PHRASES = 16  # constraints (or phrases to avoid) per line: each one widens the search


class V1Request(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: str | list[str] = Field(description="a line, or a list of lines, to translate")
    source: str = Field(description="the source language code, or auto")
    target: str = Field(description="the target language code")
    beam: int | None = Field(None, ge=1, le=32, description="beam size (default: the checkpoint's)")
    alpha: float | None = Field(None, ge=0, le=5, description="length penalty alpha (default: the checkpoint's)")
    n_best: int = Field(1, ge=1, le=32, description="translations per line, best first (at most the beam size)")
    alignment: bool = Field(False, description="word alignments of each translation (PyTorch engine)")
    attention: bool = Field(False, description="the cross-attention of each line's best translation (PyTorch engine)")
    prefix: list[str] | None = Field(None, description="per line, a prefix its translations begin with ('': none)")
    constraints: list[list[str]] | None = Field(None, description="per line, phrases its translations must contain")
    avoid: list[list[str]] | None = Field(None, description="per line, phrases its translations must not contain")
    api_key: str | None = None


class Hypothesis(BaseModel):
    text: str
    score: float = Field(description="the length-normalised score the beam ranks by")
    log_prob: float = Field(description="the summed log-probability of the translation's tokens")
    unknowns: int = Field(description="subwords that spelled nothing the vocabulary has")
    alignment: str | None = Field(None, description="source-target word pairs, 0-based: 0-0 1-2 2-1")


class Attention(BaseModel):
    source_pieces: list[str] = Field(description="the source's subwords and </s>")
    target_pieces: list[str] = Field(description="the subwords the decoder wrote, and </s>: one per decoder step")
    decoder_pieces: list[str] = Field(description="what each decoder step read: <s> and the subwords written before")
    weights: list[list[float]] = Field(
        description="the cross-attention alignments are read from (the heads train.guided_alignment taught, else "
        "the last layer's mean of all heads): one row per target piece, one column per source piece"
    )
    layers: dict[str, list[list[list[list[float]]]]] = Field(
        description="encoder (source over source), decoder (steps over the pieces read, causal) and cross (steps "
        "over source) attention: per layer, per head, rows of weights summing to 1"
    )


class LineResult(BaseModel):
    hypotheses: list[Hypothesis]
    attention: Attention | None = None


class V1Response(BaseModel):
    source: str
    target: str
    translations: list[LineResult]


def parse_v1(request: V1Request, pairs: set[tuple[str, str]], limits: Limits) -> tuple[Options, list[Item]]:
    """The call's options and items; checks that the schema alone cannot make, as ApiErrors."""
    checked = parse_translate(request.model_dump(include={"q", "source", "target"}), pairs, limits)
    lines = checked.lines
    if request.beam is not None and request.n_best > request.beam:
        raise ApiError(400, f"Invalid request: n_best {request.n_best} is more than the beam {request.beam}")
    per_line = {}
    for name in ("prefix", "constraints", "avoid"):
        given = getattr(request, name)
        if given is not None and len(given) != len(lines):
            raise ApiError(400, f"Invalid request: {name} has {len(given)} items, q {len(lines)} lines")
        per_line[name] = given or [None] * len(lines)
        _check_phrases(name, [p if isinstance(p, list) else [p] for p in given or []], limits)
    items = [
        Item(line, prefix or "", tuple(include or ()), tuple(avoid or ()))
        for line, prefix, include, avoid in zip(lines, per_line["prefix"], per_line["constraints"], per_line["avoid"])
    ]
    attention = request.alignment or request.attention
    options = Options(checked.source, checked.target, request.beam, request.alpha, request.n_best, attention)
    return options, items


def _check_phrases(name: str, per_line: list[list[str]], limits: Limits) -> None:
    """A prefix or phrases of text, each no longer than a line may be, and at most MAX_PHRASES a line."""
    phrases = [phrase for line in per_line for phrase in line]
    check_text(phrases, name)
    if any(len(line) > MAX_PHRASES for line in per_line):
        raise ApiError(400, f"Invalid request: more than {MAX_PHRASES} {name} for one line")
    if any(len(phrase) > limits.max_chars for phrase in phrases):
        raise ApiError(413, f"Invalid request: {name} longer than a line may be ({limits.max_chars} characters)")


def v1_response(request: V1Request, options: Options, results: list[Result]) -> V1Response:
    lines = []
    for result in results:
        hypotheses = [
            Hypothesis(
                text=h.text,
                score=round(h.score, 4),
                log_prob=round(h.log_prob, 4),
                unknowns=h.unknowns,
                alignment=result.alignments[k] if request.alignment and result.alignments else None,
            )
            for k, h in enumerate(result.hypotheses)
        ]
        attention = Attention(**result.attention) if request.attention and result.attention else None
        lines.append(LineResult(hypotheses=hypotheses, attention=attention))
    return V1Response(source=options.source, target=options.target, translations=lines)
