"""Translation through CTranslate2 (https://opennmt.net/CTranslate2), from a directory that
decoding/ctranslate2_export.py wrote.

`load` opens it: CTranslate2's model and our tokenizer. `Ct2Search` translates batches of subword
ids with it and returns our `Hypothesis` objects, so the `Translator` (decoding/translator.py)
handles empty lines, long inputs and input order as for PyTorch.

Greedy search is the same algorithm as ours. Beam search differs in two ways, both CTranslate2's:
it ranks finished hypotheses by log P / length ** alpha' (ours: the GNMT penalty ((5 + length) /
6) ** alpha; alpha' is chosen to prefer the same lengths), and it takes one output-length limit
per batch (ours: one per sentence; `Ct2Search` cuts each output to its sentence's own limit
afterwards). The scores it returns are turned back into ours: the summed log-probability, and
that over our length penalty.

On a CPU the threads are CTranslate2's workers (inter_threads), one thread each unless
--worker-threads asks for more (a single sentence then runs on several), and every call is
split among them: one sentence runs on one worker, many on all of them (docs/benchmarks.md
measures both against one worker of all the threads).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

import numpy

from mt_transformer import host
from mt_transformer.checkpoint import EXPORT_SETTINGS_FILE
from mt_transformer.data.tokenizer import WORD_START, Tokenizer
from mt_transformer.decoding.constraints import Constraints
from mt_transformer.decoding.search import Hypothesis, length_penalty, output_limits
from mt_transformer.errors import UserError
from mt_transformer.files import read_json
from mt_transformer.special_tokens import EOS_ID

if TYPE_CHECKING:
    import torch


def import_ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise UserError("ctranslate2 is not installed: pip install ctranslate2") from None
    return ctranslate2


def new_translator(directory: str, **options):
    """ctranslate2.Translator(directory, **options), leaving torch's thread count as it was where
    torch runs beside it: it sets the OpenMP thread count the two share, and our engine keeps its own."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else 0
    try:
        return import_ctranslate2().Translator(directory, **options)
    finally:
        if torch:
            torch.set_num_threads(threads)


def read_settings(directory: str) -> dict:
    """The checkpoint settings an exported directory records (a one-line error for a directory
    that is not an export of ours)."""
    path = os.path.join(directory, EXPORT_SETTINGS_FILE)
    if not os.path.isfile(path):
        raise UserError(
            f"{directory}: not a CTranslate2 export of mt_transformer (no {EXPORT_SETTINGS_FILE}; "
            f"make one with mt-export --format ctranslate2, or use --engine auto or torch)"
        )
    return read_json(path, "the export's decoding settings")


def load(
    directory: str, device: str | torch.device, compute_type: str = "default", threads: int = 0, worker_threads: int = 1
):
    """The CTranslate2 translator of an exported directory on `device` (cpu, cuda or cuda:N), our
    tokenizer, and the threads of each of its workers: on a CPU `threads` (0: as many as torch
    uses, host.torch_threads) in workers of `worker_threads` each."""
    kind, _, index = str(device).partition(":")
    total = threads or host.torch_threads()
    intra = min(worker_threads, total) if kind == "cpu" else 1
    try:
        translator = new_translator(
            directory,
            device=kind,
            device_index=int(index or 0),
            compute_type=compute_type,
            inter_threads=max(1, total // intra) if kind == "cpu" else 1,
            intra_threads=intra,
        )
    except (RuntimeError, ValueError) as error:
        raise UserError(f"{directory}: CTranslate2 could not load it ({str(error).splitlines()[0]})") from None
    return translator, Tokenizer(directory), intra


class Ct2Search:
    """Search over batches of source subword ids with a CTranslate2 translator, the same interface
    as torch_search.TorchSearch."""

    def __init__(self, translator, tokenizer: Tokenizer, decode, max_positions: int, worker_threads: int = 1):
        self.translator, self.tokenizer, self.decode, self.max_positions = translator, tokenizer, decode, max_positions
        self.worker_threads = worker_threads  # each worker's intra-op threads
        # every output scored again, for the model's own log-probabilities: CTranslate2's search
        # leaves out of its normalisation tokens it never outputs, ours keeps them (a second pass)
        self.exact_scores = False
        self.attention = False  # each hypothesis with its cross-attention (Translator.with_attention)
        self.first_row = True  # whether the alignments read the attention of the first step
        self.eos_piece = tokenizer.tgt.id_to_piece(EOS_ID)

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
        source_pieces = [self.tokenizer.src_pieces(s) for s in sources]
        try:
            results = self.translator.translate_batch(
                source_pieces,
                beam_size=self.decode.beam_size,
                length_penalty=(alpha := self._their_alpha(sources)),
                num_hypotheses=self.decode.n_best,
                no_repeat_ngram_size=self.decode.no_repeat_ngram,
                target_prefix=None if prefixes is None else [self.tokenizer.tgt_pieces(p) for p in prefixes],
                suppress_sequences=suppress or None,
                max_decoding_length=max(limits),
                max_input_length=0,
                return_scores=True,
                return_attention=self.attention and prefixes is None,
                return_end_token=self.attention and prefixes is None,  # its row: the step reading the last piece
                max_batch_size=self._per_worker(sources),
            )
        except RuntimeError as error:  # its GPU libraries are loaded at the first translation
            message = str(error).splitlines()[0]
            if "cannot be loaded" not in message and "not found" not in message:
                raise
            raise UserError(
                f"CTranslate2 cannot run on {self.translator.device}: {message} (the ctranslate2 wheels on PyPI "
                f"need the CUDA version they were built for); --device cpu runs it on the CPU"
            ) from None
        longest = max(limits)
        found = [
            [
                self._hypothesis(self._without_eos(pieces), score, limit, longest, alpha)
                for pieces, score in zip(result.hypotheses, result.scores)
            ]
            for result, limit in zip(results, limits)
        ]
        if self.attention and prefixes is None:
            self._attach_attention(source_pieces, results, found)
        self._score_again(sources, found)
        return found

    def _without_eos(self, pieces: list[str]) -> list[str]:
        """An output's pieces without the EOS that return_end_token (asked with attention) adds."""
        return pieces[:-1] if pieces[-1:] == [self.eos_piece] else pieces

    def _attach_attention(self, pieces: list[list[str]], results, found: list[list[Hypothesis]]) -> None:
        """Each hypothesis's attention_of weights, from its own search: the rows of the steps that
        wrote its pieces and EOS, but for the first, which CTranslate2's batched beam search on a CPU
        returns wrong (another sentence's, as it gathers that step's rows before expanding the beams;
        every later row equal to a forced pass's): for a beam search that row, the same for every
        hypothesis of a source, comes from one greedy step over the batch, unless the alignments
        read none of it (`first_row` False: word_alignment.alignment_step 1)."""
        first = None
        if self.decode.beam_size > 1 and self.first_row:
            first = self.translator.translate_batch(
                pieces,
                beam_size=1,
                max_decoding_length=1,
                max_input_length=0,
                return_attention=True,
                max_batch_size=self._per_worker(pieces),
            )
        for k, (source, result, hypotheses) in enumerate(zip(pieces, results, found)):
            for h, weights in zip(hypotheses, result.attention):
                if h.tokens:
                    h.attention = _matrix(weights[: len(h.tokens) + 1], len(source))
                    if first is not None:
                        h.attention[0] = _matrix(first[k].attention[0][:1], len(source))[0]

    def cross_attention(self, src_ids: list[int], outputs: list[list[int]]) -> list[torch.Tensor]:
        """Per output of one source, its attention_of."""
        return self.attention_of([src_ids] * len(outputs), outputs)

    def attention_of(self, sources: list[list[int]], outputs: list[list[int]]) -> list[torch.Tensor]:
        """Per (source, output) pair, the (target, source) cross-attention weights of the export's
        alignment heads (data/word_alignment.alignment_heads): each output
        forced as a target prefix through one more step (its row last; no EOS column), in one call."""
        results = self.translator.translate_batch(
            [self.tokenizer.src_pieces(ids) for ids in sources],
            target_prefix=[self.tokenizer.tgt_pieces(ids) for ids in outputs],
            beam_size=1,
            max_decoding_length=max(map(len, outputs)) + 1,
            max_input_length=0,
            return_attention=True,
            return_end_token=True,
            max_batch_size=self._per_worker(sources),
        )
        return [_matrix(result.attention[0][: len(ids) + 1]) for result, ids in zip(results, outputs)]

    def _per_worker(self, inputs: list) -> int:
        """A call's batch in one part per worker (CTranslate2 gives a whole batch to one)."""
        return -(-len(inputs) // self.translator.num_translators)

    def _their_alpha(self, sources: list[list[int]]) -> float:
        """CTranslate2's length penalty for a batch: length ** alpha' with the slope in log length of
        our ((5 + length) / 6) ** alpha at the batch's mean length (EOS counted), alpha * length /
        (5 + length), so that both searches prefer the same lengths. Its beam then writes our
        beam's translation for 96% of lines, against 77% with alpha' = alpha (small_cpu size,
        alpha 1.7, 1,000 lines of test2016; the demo model, alpha 0.6: 99.6%)."""
        length = sum(map(len, sources)) / len(sources) + 1
        return self.decode.alpha * length / (5 + length)

    def _hypothesis(self, pieces: list[str], score: float, limit: int, longest: int, alpha: float) -> Hypothesis:
        """Ours of one of CTranslate2's: its score is log P / (length + 1) ** alpha' (EOS counted),
        ours log P / the GNMT penalty of that length (greedy: log P). CTranslate2 takes one length
        limit per batch: the output is cut to its sentence's own, as our search would end it. An
        output a limit ended (log P: NaN here) is scored again, with the EOS our search puts there."""
        again = self.exact_scores or len(pieces) >= min(limit, longest)
        log_prob = float("nan") if again else score * (len(pieces) + 1) ** alpha
        ids = self.tokenizer.tgt.piece_to_id(pieces[:limit])
        return Hypothesis(ids, self._ours(log_prob, len(ids)), log_prob)

    def _ours(self, log_prob: float, length: int) -> float:
        """Our search's score of an output of `length` subwords (EOS not counted) and log P."""
        return log_prob if self.decode.beam_size == 1 else log_prob / length_penalty(length + 1, self.decode.alpha)

    def _score_again(self, sources: list[list[int]], found: list[list[Hypothesis]]) -> None:
        """The log-probability (EOS included) and score of each hypothesis _hypothesis left as NaN."""
        ended = [(i, h) for i, hypotheses in enumerate(found) for h in hypotheses if h.log_prob != h.log_prob]
        if not ended:
            return
        results = self.translator.score_batch(
            [self.tokenizer.src_pieces(sources[i]) for i, _ in ended],
            [self.tokenizer.tgt_pieces(h.tokens) for _, h in ended],
        )
        for (_, h), result in zip(ended, results):
            h.log_prob = sum(result.log_probs)
            h.score = self._ours(h.log_prob, len(h.tokens))


def _matrix(rows: list[list[float]], width: int | None = None) -> torch.Tensor:
    """CTranslate2's attention rows (lists of floats) as a (rows, width) tensor, read through numpy
    (faster than torch.tensor at nested lists)."""
    import torch

    return torch.from_numpy(numpy.array(rows, dtype=numpy.float32)[:, :width])
