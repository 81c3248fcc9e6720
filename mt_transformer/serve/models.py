"""The models a server translates with: each checkpoint (or CTranslate2 export) loaded once, the
language pairs it serves, and `Models.run`, which the batcher calls with the gathered lines of
concurrent requests that share their options.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from mt_transformer.decoding import stopping
from mt_transformer.decoding.engines import describe
from mt_transformer.decoding.translator import Translation, Translator
from mt_transformer.errors import UserError
from mt_transformer.markup.translation import translate_html

log = logging.getLogger(__name__)

# the attention weights one request may ask for (every layer and head of each line's best
# translation): about 7 MB of JSON, and what the server holds while it writes them
MAX_ATTENTION_WEIGHTS = 1_000_000


@dataclass(frozen=True)
class Options:
    """What decides a translator call: requests share a call only when they agree on all of it."""

    source: str
    target: str
    beam: int | None = None  # None: the checkpoint's decode settings
    alpha: float | None = None
    n_best: int = 1
    attention: bool = False  # word alignments and the attention of the best translation (PyTorch engine)
    html: bool = False  # each line an HTML fragment (markup/translation.py)


@dataclass(frozen=True)
class Item:
    """One line to translate, with what a /v1 request may add to it."""

    text: str
    prefix: str = ""
    include: tuple[str, ...] = ()  # phrases the translations must contain
    avoid: tuple[str, ...] = ()  # phrases they must not contain


@dataclass
class Result:
    hypotheses: list[Translation]  # best first
    alignments: list[str] | None = None  # per hypothesis, Pharaoh format (source-target word pairs)
    attention: dict | None = None  # the best translation's pieces and attention weights (serve/v1.py, Attention)


class Models:
    """The translators of a server, one per (source, target) language pair. Where CTranslate2
    runs a pair, its requests for constraints, alignments or attention run on our engine, loaded
    from the same checkpoint by `load_torch` on the first of them."""

    def __init__(
        self,
        translators: dict[tuple[str, str], Translator],
        load_torch: dict[tuple[str, str], Callable[[], Translator]] | None = None,
    ):
        self.translators = translators
        self._variants: dict[tuple, Translator] = {}
        self._load_torch = load_torch or {}
        self._torch: dict[tuple[str, str], Translator] = {}

    @property
    def engines(self) -> dict[str, str]:
        """Per pair ("en-de"), the engine that runs its requests (engines.describe)."""
        return {f"{s}-{t}": describe(translator) for (s, t), translator in sorted(self.translators.items())}

    @property
    def pairs(self) -> set[tuple[str, str]]:
        return set(self.translators)

    def run(self, options: Options, items: list[Item], given_up: Callable[[], bool] = lambda: False) -> list[Result]:
        """One result per item. Runs in the batcher's worker thread, one call at a time; stops
        (stopping.Stopped) at its next step once `given_up()`."""
        needs_torch = options.attention or any(item.include for item in items)
        translator = self._translator(options, needs_torch)
        texts = [item.text for item in items]
        if options.html:
            with stopping.stop_when(given_up):
                return [Result([Translation(text, [], 0.0, 0.0)]) for text in translate_html(translator, texts)]
        prefixes = [item.prefix for item in items] if any(item.prefix for item in items) else None
        if prefixes and translator.max_positions:
            longest = max(map(len, translator.target_ids(prefixes)))
            if longest >= translator.max_positions:
                raise UserError(f"prefix: {longest} subwords, more than this model's {translator.max_positions - 1}")
        constraints = None
        if any(item.include or item.avoid for item in items):
            constraints = ([list(item.include) for item in items], [list(item.avoid) for item in items])
        if options.attention:
            if translator.model is None:
                raise UserError("alignments and attention need the PyTorch engine; this server runs CTranslate2")
            sources = translator.source_ids(texts)
            attention_budget(translator, sources, [[] for _ in texts])  # before the translation: the sources alone
        with stopping.stop_when(given_up):
            found = translator(texts, prefixes=prefixes, constraints=constraints)
            if not options.attention:
                return [Result(hypotheses) for hypotheses in found]
            attention_budget(translator, sources, [hypotheses[0].tokens for hypotheses in found])
            return [_with_attention(translator, ids, hypotheses) for ids, hypotheses in zip(sources, found)]

    def _translator(self, options: Options, needs_torch: bool) -> Translator:
        pair = (options.source, options.target)
        needs_torch = needs_torch and self.translators[pair].model is None and pair in self._load_torch
        key = (*pair, options.beam, options.alpha, options.n_best, needs_torch)
        if key not in self._variants:
            base = self._torch_translator(pair) if needs_torch else self.translators[pair]
            beam = options.beam or max(base.decode.beam_size, options.n_best)  # alternatives widen the beam
            changes = {"beam_size": beam, "alpha": options.alpha, "n_best": options.n_best}
            self._variants[key] = base.with_settings(**changes)
        return self._variants[key]

    def _torch_translator(self, pair: tuple[str, str]) -> Translator:
        if pair not in self._torch:
            log.info("%s-%s: requests for constraints, alignments or attention run on our engine", *pair)
            served = self.translators[pair]
            self._torch[pair] = dataclasses.replace(self._load_torch[pair](), leads=served.leads)
        return self._torch[pair]


def attention_budget(translator: Translator, sources: list[list[int]], outputs: list[list[int]]) -> None:
    """Refuse attention maps of more than MAX_ATTENTION_WEIGHTS weights in all: each line's source
    over itself in every encoder layer and head, and its output over itself and the source in
    every decoder layer and head (EOS and BOS counted)."""
    model = translator.config.model
    total = 0
    for src, out in zip(sources, outputs):
        s, t = len(src) + 1, len(out) + 1
        total += model.n_heads * (model.encoder_layers * s * s + model.decoder_layers * t * (t + s)) + t * s
    if total > MAX_ATTENTION_WEIGHTS:
        raise UserError(
            f"attention: {total:,} weights for these lines, more than the {MAX_ATTENTION_WEIGHTS:,} a request "
            f"may have; ask for it on fewer or shorter lines"
        )


def _with_attention(translator: Translator, src_ids: list[int], hypotheses: list[Translation]) -> Result:
    """The hypotheses with their word alignments, and every attention weight of the best one:
    `weights`, the cross-attention its alignments are read from (Translator.cross_attention's, as
    mt-translate --alignment and --attention take it), and `layers`, each kind's weights per
    layer and head (decoding/attention_maps.py)."""
    from mt_transformer.decoding.alignment import aligned_words, format_alignment, one_source

    stopping.check()
    outputs = [h.tokens for h in hypotheses]
    found = aligned_words(translator, [src_ids] * len(outputs), outputs, one_source(translator))
    matrix, attention = found[0][2] if found else None, None
    if matrix is not None:
        tgt_pieces = translator.tokenizer.tgt_pieces(outputs[0])
        attention = {
            "source_pieces": translator.tokenizer.src_pieces(src_ids) + ["</s>"],
            "target_pieces": tgt_pieces + ["</s>"],
            "decoder_pieces": ["<s>"] + tgt_pieces,
            "weights": _rounded(matrix),
            "layers": _every_layer(translator, src_ids, outputs[0]),
        }
    return Result(hypotheses, [format_alignment(pairs) for pairs, _, _ in found], attention)


def _every_layer(translator: Translator, src_ids: list[int], tgt_ids: list[int]) -> dict:
    """{"encoder": ..., "decoder": ..., "cross": ...}: per layer, per head, the (queries, keys) weights."""
    from mt_transformer.decoding.attention_maps import attention_maps

    maps = attention_maps(translator.model, src_ids, tgt_ids, translator.config.model.source_tag_after_eos)
    kinds = {"encoder": maps.encoder, "decoder": maps.decoder, "cross": maps.cross}
    return {kind: [[_rounded(head) for head in layer[0]] for layer in layers] for kind, layers in kinds.items()}


def _rounded(matrix) -> list[list[float]]:
    return [[round(w, 3) for w in row] for row in matrix.tolist()]


def load_models(
    paths: list[str],
    engine: str = "auto",
    device: str = "auto",
    compute_type: str = "default",
    threads: int = 0,
    worker_threads: int = 1,
) -> Models:
    """Every checkpoint (run directory, checkpoint file or mt-export directory) loaded once on
    `engine` (auto: as decoding/runtime.py settles), by the language pairs it was trained
    on; a model trained with target tags serves each of its pairs through its tag, an NLLB or
    M2M100 import every pair of its languages (by their two-letter codes where they have one).
    Two checkpoints for one pair are an error."""
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.decoding.runtime import is_export

    translators: dict[tuple[str, str], Translator] = {}
    owners: dict[tuple[str, str], str] = {}
    load_torch = {}
    for path in paths:
        translator = open_translator(
            path, engine, device, compute_type, threads, tagged=False, worker_threads=worker_threads
        )
        for pair, changes in _pairs(translator).items():
            if pair in owners and owners[pair] != path:
                raise UserError(f"--checkpoint: {owners[pair]} and {path} both translate {pair[0]} -> {pair[1]}")
            owners[pair] = path
            translators[pair] = dataclasses.replace(translator, **changes)
            if translator.model is None and not is_export(path):
                load_torch[pair] = functools.partial(open_translator, path, "torch", device, tagged=False)
    return Models(translators, load_torch)


def _pairs(translator: Translator) -> dict[tuple[str, str], dict]:
    """The language pairs a model serves, each with the leads its translator sets for it: the
    target tag of a model trained with them, or the language tokens of an NLLB or M2M100 import."""
    return {pair: {"leads": leads} for pair, leads in translator.languages.served().items()}
