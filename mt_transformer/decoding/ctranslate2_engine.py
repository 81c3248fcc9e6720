"""Translation through CTranslate2 (https://opennmt.net/CTranslate2), from a directory that
exchange/ctranslate2_export.py wrote.

`load` opens it: CTranslate2's model, our tokenizer and the checkpoint's settings. `Ct2Search`
translates batches of subword ids with it and returns our `Hypothesis` objects, so the
`Translator` (decoding/translator.py) handles empty lines, long inputs and input order as for
PyTorch.

Greedy search is the same algorithm as ours. Beam search differs in two ways, both CTranslate2's:
it normalises scores by length ** alpha (ours: the GNMT penalty ((5 + length) / 6) ** alpha), and
it takes one output-length limit per batch (ours: one per sentence; `Ct2Search` cuts each output
to its sentence's own limit afterwards).
"""

from __future__ import annotations

import os

import torch

from mt_transformer.checkpoint import EXPORT_SETTINGS_FILE
from mt_transformer.data.tokenizer import WORD_START, Tokenizer
from mt_transformer.decoding.constraints import Constraints
from mt_transformer.decoding.search import Hypothesis, output_limits
from mt_transformer.errors import UserError
from mt_transformer.files import read_json


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError(
            "ctranslate2 is not installed: pip install ctranslate2 (or pip install 'mt_transformer[ctranslate2]')"
        ) from None
    return ctranslate2


def load(directory: str, device: torch.device, compute_type: str = "default", threads: int = 0):
    """The CTranslate2 translator on `device` (cpu, or cuda with its index), our tokenizer and the
    settings of an exported directory."""
    ctranslate2 = import_ctranslate2()
    path = os.path.join(directory, EXPORT_SETTINGS_FILE)
    if not os.path.isfile(path):
        raise UserError(
            f"{directory}: not a CTranslate2 export of mt_transformer (no {EXPORT_SETTINGS_FILE}; "
            f"make one with mt-export --format ctranslate2)"
        )
    settings = read_json(path, "the export's decoding settings")
    try:
        translator = ctranslate2.Translator(
            directory,
            device=device.type,
            device_index=device.index or 0,
            compute_type=compute_type,
            intra_threads=threads or torch.get_num_threads(),
        )
    except (RuntimeError, ValueError) as error:
        raise UserError(f"{directory}: CTranslate2 could not load it ({str(error).splitlines()[0]})") from None
    return translator, Tokenizer(directory), settings


class Ct2Search:
    """Search over batches of source subword ids with a CTranslate2 translator, the same interface
    as torch_search.TorchSearch."""

    def __init__(self, translator, tokenizer: Tokenizer, decode, max_positions: int):
        self.translator, self.tokenizer, self.decode, self.max_positions = translator, tokenizer, decode, max_positions

    def __call__(
        self,
        sources: list[list[int]],
        prefixes: list[list[int]] | None = None,
        constraints: list[Constraints] | None = None,
    ) -> list[list[Hypothesis]]:
        """Hypotheses for `sources`. CTranslate2 can suppress phrases (for a whole batch: inputs are
        grouped by their phrases to avoid) but not require them."""
        if constraints and any(c.include for c in constraints):
            raise UserError("--constraints: needs --engine torch (CTranslate2 cannot require phrases; --avoid works)")
        groups: dict[tuple, list[int]] = {}
        for i in range(len(sources)):
            groups.setdefault(constraints[i].avoid if constraints else (), []).append(i)
        found: list[list[Hypothesis]] = [[] for _ in sources]
        for avoid, members in groups.items():
            hypotheses = self._translate(
                [sources[i] for i in members], None if prefixes is None else [prefixes[i] for i in members], avoid
            )
            for i, h in zip(members, hypotheses):
                found[i] = h
        return found

    def _translate(
        self, sources: list[list[int]], prefixes: list[list[int]] | None, avoid: tuple[str, ...]
    ) -> list[list[Hypothesis]]:
        limits = output_limits(sources, self.decode, self.max_positions, prefixes)
        # the phrases as the tokenizer splits them: CTranslate2 suppresses subword sequences
        suppress = self.tokenizer.tgt.encode([p.replace(WORD_START, " ").strip() for p in avoid], out_type=str)
        try:
            results = self.translator.translate_batch(
                [self.tokenizer.src_pieces(s) for s in sources],
                beam_size=self.decode.beam_size,
                length_penalty=self.decode.alpha,
                num_hypotheses=self.decode.n_best,
                no_repeat_ngram_size=self.decode.no_repeat_ngram,
                target_prefix=None if prefixes is None else [self.tokenizer.tgt_pieces(p) for p in prefixes],
                suppress_sequences=suppress or None,
                max_decoding_length=max(limits),
                max_input_length=0,
                return_scores=True,
            )
        except RuntimeError as error:  # its GPU libraries are loaded at the first translation
            message = str(error).splitlines()[0]
            if "cannot be loaded" not in message and "not found" not in message:
                raise
            raise UserError(
                f"CTranslate2 cannot run on {self.translator.device}: {message} (the ctranslate2 wheels on PyPI "
                f"need the CUDA version they were built for); --device cpu runs it on the CPU"
            ) from None
        found = []
        for result, limit in zip(results, limits):
            hypotheses = []
            for pieces, score in zip(result.hypotheses, result.scores):
                # CTranslate2 takes one limit per batch: cut to this sentence's own, as our search would
                ids = [self.tokenizer.tgt.piece_to_id(p) for p in pieces[:limit]]
                # CTranslate2 returns the length-normalised score only: the summed log-probability is unknown
                hypotheses.append(Hypothesis(ids, score, float("nan")))
            found.append(hypotheses)
        return found
