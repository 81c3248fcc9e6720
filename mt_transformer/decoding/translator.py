"""The translator: lines of text in, translations out. It tokenizes, batches by tokens (longest
first), runs one engine's search (PyTorch, torch_search.py, or CTranslate2), detokenizes, and
puts the results back in input order. Exactly one result per input line; an empty line gives an
empty translation, and a line too long for the model (or for memory) is translated in parts.

mt-translate, mt-eval, validation during training and the benchmark all translate through it.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tqdm import tqdm

from mt_transformer.config import Config, DecodeConfig, validate
from mt_transformer.data.budgets import budget_batches
from mt_transformer.data.language_codes import public_code
from mt_transformer.data.languages import LanguageScheme, Leads, language_scheme
from mt_transformer.data.text import normalize, with_case_of
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.data.word_alignment import alignment_heads, alignment_step, leaves_unaligned
from mt_transformer.decoding import stopping
from mt_transformer.decoding.constraints import Constraints, encode_constraints
from mt_transformer.decoding.long_inputs import join_hypotheses, segments_of
from mt_transformer.decoding.runtime import Runtime, ours
from mt_transformer.decoding.search import Hypothesis
from mt_transformer.decoding.unknowns import unknown_fills
from mt_transformer.errors import UserError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


@dataclass
class Translation:
    text: str
    tokens: list[int]
    score: float
    log_prob: float
    unknowns: int = 0  # subwords that spelled nothing: <unk> (filled from the source or left out) or broken bytes
    attention: torch.Tensor | None = None  # (len(tokens), source): with_attention's, where the engine gave it


def source_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """Indices of non-empty inputs, longest first, in batches of at most max_tokens source tokens
    (EOS included; a single longer input gets a batch of its own)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: -lengths[i])
    return budget_batches(order, [lengths[i] + 1 for i in order], max_tokens)


@dataclass
class Translator:
    # (subword ids, forced target prefixes or None, constraints or None) -> hypotheses, best first
    search: Callable[[list[list[int]], list[list[int]] | None, list[Constraints] | None], list[list[Hypothesis]]]
    tokenizer: Tokenizer
    decode: DecodeConfig  # the settings in effect
    max_input_len: int | None  # longer inputs are cut into parts; None: no limit
    model: torch.nn.Module | None = None  # the PyTorch engine's model (attention, alignments)
    runtime: Runtime | None = None  # the engine, device and precision it runs on (decoding/runtime.py)
    config: Config | None = None  # the model's config, with `decode` in effect
    # the ids every source begins with (a target tag, a language token) and those every output is
    # forced to begin with (a language token): data/languages.py
    leads: Leads = ([], [])

    @property
    def target_language(self) -> str | None:
        """The language this translator writes, when it is known: BLEU tokenizes for it."""
        asked = self.languages.language(self.leads)
        if asked is not None:  # sacreBLEU knows zh, ja, ko by their two-letter codes
            return public_code(asked)
        return self.config.data.target_language if self.config else None

    @functools.cached_property
    def languages(self) -> LanguageScheme:
        """How the model is told its languages (data/languages.py)."""
        if self.config is None:
            return LanguageScheme(())
        return language_scheme(self.config.data, self.tokenizer, self.config.model.source_tag_after_eos)

    @property
    def device(self) -> torch.device:
        """The device our engine runs on (importing torch)."""
        import torch

        return torch.device(self.runtime.device)

    @property
    def max_positions(self) -> int | None:
        """The most positions the engine's model holds; None: no limit (sinusoids extend to any length)."""
        return getattr(self.search, "max_positions", None)

    def with_settings(self, **changes) -> Translator:
        """The same model(s) searching with other decode settings (beam_size, n_best, alpha, ...),
        checked as a config file's are; the model is shared, not copied."""
        config = with_decode(self.config, **changes)
        search = copy.copy(self.search)
        search.decode = config.decode
        runtime = self.runtime
        if changes.get("precision") is not None and runtime.engine == "torch":
            runtime = search.runtime = runtime.with_precision(changes["precision"])
        return dataclasses.replace(self, search=search, decode=config.decode, config=config, runtime=runtime)

    def cross_attention(
        self, src_ids: list[int], outputs: list[list[int]], layer: int | None = None, head: int | None = None
    ) -> list[torch.Tensor]:
        """Per output of `src_ids` (subword ids, non-empty), the cross-attention of decoder `layer`
        (0-based), `head` (None: the mean of all heads): (target, source) weights, row t the step
        that wrote piece t, then the one that wrote EOS (our engine adds the EOS column; an
        ensemble: its first model's). Neither given: the heads that give the model's alignments (those
        train.guided_alignment taught, else the last layer's mean), the only ones CTranslate2 gives."""
        if self.model is None:
            if layer is not None or head is not None:
                raise UserError("attention of one layer or head: needs --engine torch or auto")
            return self.search.cross_attention(src_ids, outputs)
        from mt_transformer.decoding.alignment import cross_attention, select

        model = getattr(self.model, "members", [self.model])[0]
        aligning, first = alignment_heads(self.config) if self.config else (-1, None)
        chosen = (
            (aligning, None, first) if layer is None and head is None else (aligning if layer is None else layer, head)
        )
        found = cross_attention(model, src_ids, outputs, self.device, self.languages.tag_after_eos)
        return [select(w, *chosen) for w in found]

    def attention_of(self, sources: list[list[int]], outputs: list[list[int]]) -> list[torch.Tensor]:
        """Per (source, output) pair, cross_attention's default weights; one call where
        CTranslate2 runs."""
        if self.model is None:
            return self.search.attention_of(sources, outputs)
        return [self.cross_attention(src, [out])[0] for src, out in zip(sources, outputs)]

    def with_exact_scores(self) -> Translator:
        """The same translator, its hypotheses' log-probabilities the model's own to the last digit
        (CTranslate2 scores each output again; ours computes them so)."""
        if not hasattr(self.search, "exact_scores"):
            return self
        search = copy.copy(self.search)
        search.exact_scores = True
        return dataclasses.replace(self, search=search)

    def with_attention(self) -> Translator:
        """The same translator, CTranslate2's translations carrying the attention_of weights of the
        steps that wrote them (no second call for them); ours computes them when asked."""
        if not hasattr(self.search, "attention"):
            return self
        search = copy.copy(self.search)
        search.attention, search.first_row = True, self.alignment_step == 0
        return dataclasses.replace(self, search=search)

    @property
    def alignment_step(self) -> int:
        """word_alignment.alignment_step of the model: 1 where its alignments are read from the
        step after the one that writes a piece."""
        return alignment_step(self.config) if self.config else 0

    @property
    def leaves_unaligned(self) -> bool:
        """word_alignment.leaves_unaligned of the model."""
        return leaves_unaligned(self.config) if self.config else False

    def reseed(self, offset: int) -> None:
        """Sampling draws from decode.seed + offset from here on: a corpus seeds each window by its
        number, so that a window translates the same whether or not the ones before it ran."""
        sampler = getattr(self.search, "sampler", None)
        if sampler is not None:
            sampler.generator.manual_seed(self.decode.seed + offset)

    def source_ids(self, lines: list[str]) -> list[list[int]]:
        """The subword ids of lines as the model reads them: normalized and encoded, after the
        source head (a target tag, a language token; empty lines stay empty)."""
        return self._after_source_head(self.tokenizer.encode_src([normalize(line) for line in lines]))

    def _after_source_head(self, ids: list[list[int]]) -> list[list[int]]:
        head = self.leads[0]
        return [head + line if line else line for line in ids] if head else ids

    def target_ids(self, lines: list[str]) -> list[list[int]]:
        """The subword ids of given translations as the model writes them: after the target
        language's token of a model with language tokens."""
        ids = self.tokenizer.tgt.encode([normalize(line) for line in lines])
        return [self.leads[1] + line for line in ids] if self.leads[1] else ids

    def __call__(
        self,
        lines: list[str],
        progress: bool | Callable[[int], None] = False,
        prefixes: list[str] | None = None,
        constraints: tuple[list[list[str]], list[list[str]]] | None = None,
        first_line: int = 0,
    ) -> list[list[Translation]]:
        """Per line, up to decode.n_best translations, best first; each begins with its line's
        prefix when `prefixes` are given (one per line, "" for none). `constraints`: per line, the
        phrases every translation must contain and those none may contain. `progress`: a bar, or a
        function told how many inputs each batch finished. `first_line`: the 0-based number of
        the first line in a larger file, for messages."""
        texts = [normalize(line) for line in lines]
        ids = self._after_source_head(self.tokenizer.encode_src(texts))  # source_ids(lines), normalized once
        forced = self.target_ids(prefixes) if prefixes is not None else None
        if self.leads[1] and forced is None:  # every output begins with its language's token
            forced = [list(self.leads[1]) for _ in lines]
        lexical = encode_constraints(self.tokenizer, self.decode, *constraints, first_line) if constraints else None
        segments, owners, segment_prefixes, segment_constraints = segments_of(self, ids, forced, lexical, first_line)
        found = self._search_segments(
            segments, segment_prefixes if forced else None, segment_constraints if lexical else None, progress
        )
        per_line: list[list[list[Hypothesis]]] = [[] for _ in lines]
        for line, hypotheses in zip(owners, found):
            per_line[line].append(hypotheses)
        results = []
        for line, parts in enumerate(per_line):
            hypotheses = parts[0] if len(parts) == 1 else join_hypotheses(parts)
            if lexical and any(lexical[line].unmet(h.tokens) for h in hypotheses):
                log.warning(
                    "line %d: no translation within the length limit holds every phrase of --constraints; "
                    "printed without them",
                    first_line + line + 1,
                )
            whole = ids[line] if len(parts) == 1 else None  # alignment needs the input translated whole
            fills = unknown_fills(
                self.cross_attention,
                self.tokenizer,
                texts[line],
                whole,
                [h.tokens for h in hypotheses],
                len(self.leads[0]),
            )
            translations = []
            for h, f in zip(hypotheses, fills):
                text, unknowns = self.tokenizer.detokenize(h.tokens, f)
                if not (prefixes and prefixes[line]):  # a prefix is kept as it was given
                    text = with_case_of(lines[line], text)
                translations.append(Translation(text, h.tokens, h.score, h.log_prob, unknowns, h.attention))
            results.append(translations)
        return results

    def _search_segments(
        self,
        segments: list[list[int]],
        prefixes: list[list[int]] | None,
        constraints: list[Constraints] | None,
        progress: bool | Callable[[int], None],
    ) -> list[list[Hypothesis]]:
        """Each segment's hypotheses, searched in batches of decode.max_tokens, longest first."""
        found: list[list[Hypothesis]] = [[Hypothesis([], 0.0, 0.0)] for _ in segments]  # empty inputs stay empty
        batches = source_batches([len(s) for s in segments], self.decode.max_tokens)
        advance = progress if callable(progress) else None
        with tqdm(total=sum(map(len, batches)), unit="sent", disable=progress is not True, leave=False) as bar:
            for batch in batches:
                stopping.check()
                batch_prefixes = [prefixes[i] for i in batch] if prefixes is not None else None
                batch_constraints = [constraints[i] for i in batch] if constraints is not None else None
                for i, hypotheses in zip(
                    batch, self.search([segments[i] for i in batch], batch_prefixes, batch_constraints)
                ):
                    found[i] = hypotheses
                bar.update(len(batch))
                if advance:
                    advance(len(batch))
        return found


def input_limit(config: Config, max_positions: int | None) -> int:
    """Inputs longer than this many subwords are translated in parts: decode.max_input_len, else
    the data.max_len the model was trained with, and below the model's position table."""
    limit = config.decode.max_input_len or config.data.max_len
    return min(limit, max_positions - 1) if max_positions is not None else limit


def with_decode(config: Config, **changes) -> Config:
    """The config with some decode settings changed (None: keep), checked as a config file's are."""
    changed = dataclasses.replace(
        config, decode=dataclasses.replace(config.decode, **{k: v for k, v in changes.items() if v is not None})
    )
    validate(changed)
    return changed


def torch_translator(model, tokenizer: Tokenizer, config: Config, runtime: Runtime | torch.device) -> Translator:
    """A translator for a PyTorch model in memory (validation, the benchmark: on a device, at
    config.decode.precision), or loaded (decoding/engines.py: on its runtime)."""
    from mt_transformer.decoding.torch_search import TorchSearch

    if not isinstance(runtime, Runtime):  # a torch.device
        runtime = Runtime("torch", str(runtime), ours(runtime, config.decode.precision), why="a model in memory")
    learned = config.model.positions == "learned"
    max_positions = config.model.max_positions if learned else None  # sinusoids extend to any length
    model.eval()
    search = TorchSearch(model, tokenizer, runtime, config.decode, max_positions, config.model.source_tag_after_eos)
    translator = Translator(
        search, tokenizer, config.decode, input_limit(config, max_positions), model, runtime, config
    )
    translator.leads = translator.languages.token_leads()
    return translator
