"""The PyTorch engine of the translator: greedy, beam or sampling search over batches of subword
sequences on the model's own decoder, lexical constraints met in a second search where the first
misses them, and out-of-memory errors survived by halving the batch, then the input.

In bf16 or fp16 the searches run a copy of the model whose linear layers hold their weights in
that precision, made once per TorchSearch: autocast inside inference_mode keeps no cast copies and
would cast every weight again at every step (docs/benchmarks.md). A translator is made for the
weights it is given: training's validation makes one each time it translates."""

from __future__ import annotations

import copy
import dataclasses
import logging

import torch

from mt_transformer.config import DecodeConfig
from mt_transformer.data.batching import pad, pad_sources
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.decoding.beam import beam_search
from mt_transformer.decoding.constraints import Constraints, PieceIndex
from mt_transformer.decoding.greedy import greedy_search
from mt_transformer.decoding.lexical_beam import LexicalBeam
from mt_transformer.decoding.long_inputs import cut_points, join_hypotheses, split_at
from mt_transformer.decoding.runtime import Runtime
from mt_transformer.decoding.sampling import Sampler, sample
from mt_transformer.decoding.search import Hypothesis, output_limits
from mt_transformer.devices import PRECISIONS, autocast, is_out_of_memory, release_memory
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID

log = logging.getLogger(__name__)


class TorchSearch:
    """Greedy or beam search with the PyTorch model over batches of subword sequences, surviving
    out-of-memory errors: a batch that does not fit is halved, and a single input that does not
    fit is translated in two parts."""

    def __init__(
        self,
        model,
        tokenizer: Tokenizer,
        runtime: Runtime,
        decode: DecodeConfig,
        max_positions: int | None,
        tag_after_eos: bool = False,
    ):
        self.model, self.tokenizer, self.runtime = model, tokenizer, runtime  # runtime.precision: what runs
        self.tag_after_eos = tag_after_eos  # where the sources' language token goes (batching.encoder_input)
        self._copies: dict[torch.dtype, torch.nn.Module] = {}  # the model with half-precision linear weights
        self.decode, self.max_positions = decode, max_positions
        self._piece_index: PieceIndex | None = None  # built for the first phrases to avoid
        self.sampler = (
            Sampler(decode.topk, decode.topp, decode.temperature, decode.seed, self.device) if decode.sampling else None
        )

    @property
    def device(self) -> torch.device:
        return torch.device(self.runtime.device)

    def runnable(self) -> torch.nn.Module:
        """The model as the searches run it at the runtime's precision: itself in fp32, else a copy
        whose linear layers hold their weights (not the embeddings or norms) in bf16 or fp16."""
        dtype = PRECISIONS[self.runtime.precision]
        if dtype == torch.float32:
            return self.model
        if dtype not in self._copies:
            self._copies[dtype] = linears_in(self.model, dtype)
        return self._copies[dtype]

    def search(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]] | None = None,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        """The search's hypotheses. Inputs with constraints whose unconstrained translations
        (every one of the n best) do not already meet them are searched again with them; where
        that finds no translation holding every phrase within the length limit, the unconstrained
        ones stay, their `unmet` counting the phrases they lack."""
        found = self._search(sources, prefixes)
        pieces = self.tokenizer.tgt_pieces
        redo = [
            i
            for i, c in enumerate(constraints or [])
            if c and not all(c.met_by(h.tokens, pieces(h.tokens)) for h in found[i])
        ]
        if not redo:
            return found
        again = self._search(
            [sources[i] for i in redo],
            None if prefixes is None else [prefixes[i] for i in redo],
            [constraints[i] for i in redo],
        )
        for i, hypotheses in zip(redo, again):
            complete = [h for h in hypotheses if h.unmet == 0]
            found[i] = complete or [dataclasses.replace(h, unmet=constraints[i].unmet(h.tokens)) for h in found[i]]
        return found

    def piece_index(self) -> PieceIndex:
        if self._piece_index is None:
            self._piece_index = PieceIndex(self.tokenizer.tgt)
        return self._piece_index

    def _search(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]] | None,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        src = pad_sources(sources, self.tag_after_eos).to(self.device)  # (batch, src_len)
        src_mask = padding_mask(src, PAD_ID)  # (batch, 1, 1, src_len)
        max_len = torch.tensor(output_limits(sources, self.decode, self.max_positions, prefixes))  # (batch,)
        prefix = None
        if prefixes is not None and any(prefixes):  # (batch, longest prefix), -1 past each one's end
            prefix = pad([p or [-1] for p in prefixes], value=-1).to(self.device)
        d = self.decode
        common = dict(bos_id=BOS_ID, eos_id=EOS_ID, no_repeat_ngram=d.no_repeat_ngram, prefix=prefix)
        model = self.runnable()
        with autocast(self.device, self.runtime.precision):  # the searches take log-probabilities in float32
            if self.sampler is not None:
                return sample(model, src, src_mask, max_len, sampler=self.sampler, n=d.n_best, alpha=d.alpha, **common)
            if d.beam_size == 1 and constraints is None:
                return [[h] for h in greedy_search(model, src, src_mask, max_len, **common)]
            return beam_search(
                model,
                src,
                src_mask,
                max_len,
                beam_size=d.beam_size,
                alpha=d.alpha,
                n_best=d.n_best,
                lexical=None if constraints is None else LexicalBeam(constraints, EOS_ID, self.piece_index()),
                **common,
            )

    def __call__(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]] | None = None,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        try:
            return self.search(sources, prefixes, constraints)
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
            first, second = (
                [None if x is None else x[part] for x in (sources, prefixes, constraints)]
                for part in (slice(None, half), slice(half, None))
            )
            return self(*first) + self(*second)
        source = sources[0]
        if len(source) < 2:
            log.warning("out of memory translating a single subword: its translation is left empty")
            return [[Hypothesis([], 0.0, 0.0)]]
        log.warning("out of memory translating one input of %d subwords: translating it in two parts", len(source))
        parts = split_at(source, cut_points(self.tokenizer.src_pieces(source), (len(source) + 1) // 2))
        # a forced prefix and the phrases to include go to the first part, phrases to avoid to every part
        first = self([parts[0]], prefixes, constraints)[0]
        rest = None if not constraints else [dataclasses.replace(constraints[0], include=())]
        return [join_hypotheses([first] + [self([part], None, rest)[0] for part in parts[1:]])]


def linears_in(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """A copy of `model` whose linear layers hold their weights and biases in `dtype`, for
    autocast's products to find them cast; the rest of the copy stays float32 (a tied output
    projection gets a weight of its own, the embedding keeps the float32 one)."""
    model = copy.deepcopy(model)
    for layer in model.modules():
        if isinstance(layer, torch.nn.Linear):
            layer.weight = torch.nn.Parameter(layer.weight.detach().to(dtype), requires_grad=False)
            if layer.bias is not None:
                layer.bias = torch.nn.Parameter(layer.bias.detach().to(dtype), requires_grad=False)
    return model
