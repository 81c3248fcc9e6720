"""The training data as the update loop draws it: each epoch's token-bucketed batches (shuffled by
the run's seed and the epoch, corpora drawn by their temperature), this rank's shard of them,
pairs changed as people type under data.augment and a segmentation drawn anew for every batch
under data.spm_alpha; loaders that start where a resumed run stopped."""

from __future__ import annotations

import logging

import numpy as np

from mt_transformer.config import Config
from mt_transformer.data.attention_targets import GuidedTargets, tokenizer_word_starts
from mt_transformer.data.augment import PairAugmenter
from mt_transformer.data.batching import batch_loader, corpus_rows, lengths, token_batches
from mt_transformer.data.epoch_draw import draw_epoch
from mt_transformer.data.prepare import SubwordEncoder
from mt_transformer.data.tokenizer import Tokenizer
from mt_transformer.errors import UserError
from mt_transformer.processes import Processes
from mt_transformer.training import distributed

log = logging.getLogger(__name__)


class TrainingBatches:
    def __init__(
        self,
        config: Config,
        dataset,
        tokenizer_dir: str,
        corpus_sizes: list[int],
        processes: Processes,
    ):
        """`dataset`: the encoded training pairs, the corpora laid end to end with `corpus_sizes`
        pairs each; `tokenizer_dir`: where the run's tokenizer is, for drawing segmentations."""
        self.data, self.train, self.processes = config.data, config.train, processes
        self.tag_after_eos = config.model.source_tag_after_eos  # where the sources' language token goes
        self.corpus_sizes = list(corpus_sizes)
        self.src_lens, self.tgt_lens = lengths(dataset)
        self.aligned = "alignment" in dataset.column_names  # the pairs' word alignments (data/word_alignment.py)
        self.guided = None  # what train.guided_alignment teaches the batches
        guided = config.train.guided_alignment
        if self.aligned and guided.weight > 0:
            starts = tokenizer_word_starts(Tokenizer(tokenizer_dir))
            self.guided = GuidedTargets(starts, guided.step == "reads", guided.unaligned_to_eos)
        self.pairs, self.resample = self._segmentation(dataset, tokenizer_dir)
        # what an epoch drawn without changes reads: the encoded columns, not the text
        self.encoded = self.pairs.select_columns([c for c in self.pairs.column_names if c not in ("src", "tgt")])
        self._last_epoch = (None, [], self.pairs)  # (epoch, its batches, the pairs they index)
        self.sampled_in = lambda epoch: True  # whether an epoch samples segmentations (training/sampling_fit.py)

    def plain_epoch_updates(self) -> int:
        """The updates in one epoch of the unchanged pairs, on this rank."""
        batches = token_batches(self.src_lens, self.tgt_lens, self.train.max_tokens, self.train.seed, 0)
        return len(batches) // self.processes.world_size // self.train.accumulate

    def _segmentation(self, dataset, tokenizer_dir: str):
        """The columns the loader reads, and what changes and encodes the pairs of each epoch anew
        under data.augment or data.spm_alpha (None without them)."""
        data = self.data
        augment = [data.augment_of(corpus) for corpus in data.corpus_list()]
        columns = ["src_ids", "tgt_ids"] + (["alignment"] if self.aligned else [])
        if not data.spm_alpha and not any(a.active for a in augment):
            return dataset.select_columns(columns), None
        resample = PairAugmenter(SubwordEncoder(tokenizer_dir, data.spm_alpha), augment, self.corpus_sizes, data.tags)
        return dataset.select_columns([*columns, "src", "tgt"]), resample

    def epoch(self, epoch: int) -> list:
        """This rank's batches of `epoch`: arrays of rows of the pairs the epoch reads (the encoded
        data, or its drawn pairs)."""
        if self._last_epoch[0] != epoch:
            self._last_epoch = (None, [], self.pairs)  # the last epoch's drawn pairs go before new ones come
            self._last_epoch = (epoch, *self._draw_epoch(epoch))
        return self._last_epoch[1]

    def _draw_epoch(self, epoch: int) -> tuple[list, object]:
        """This rank's batches of `epoch` and the pairs they index: the encoded data, or the
        epoch's drawn pairs (data/epoch_draw.py), batched by their own lengths."""
        train = self.train
        seed = train.seed
        rows = corpus_rows(self.corpus_sizes, self.data.sampling_temperature, seed, epoch)
        resample = self.resample
        if resample is not None and self.data.spm_alpha and not self.sampled_in(epoch):
            resample = resample.without_sampling()
        if resample is not None:
            rows = np.arange(len(self.src_lens)) if rows is None else rows
            longest = min(self.data.max_len or train.max_tokens, train.max_tokens - 1)
            pairs, seconds = draw_epoch(self.pairs, rows, resample, longest, (seed, epoch), train.num_workers)
            if self.processes.is_main:
                log.info("epoch %d: %d pairs drawn anew in %.1f s", epoch, len(pairs), seconds)
            batches = token_batches(pairs.src_lens, pairs.tgt_lens, train.max_tokens, seed, epoch)
        elif rows is None:
            pairs, batches = self.encoded, token_batches(self.src_lens, self.tgt_lens, train.max_tokens, seed, epoch)
        else:
            found = token_batches(self.src_lens[rows], self.tgt_lens[rows], train.max_tokens, seed, epoch)
            pairs, batches = self.encoded, [rows[b] for b in found]
        if len(batches) < self.processes.world_size:
            raise UserError(
                f"train.max_tokens: the training data makes {len(batches)} batches, fewer than the "
                f"{self.processes.world_size} processes; use fewer processes or a smaller train.max_tokens"
            )
        return distributed.shard(batches, self.processes), pairs

    def loader(self, batches: list, epoch: int, cuda: bool):
        """The padded batches of `batches` (the rest of `epoch`'s), loaded by train.num_workers."""
        self.epoch(epoch)  # the pairs the batches index
        pairs = self._last_epoch[2]
        return batch_loader(pairs, batches, self.train.num_workers, cuda, self.tag_after_eos, self.guided)
