"""The training data as the update loop draws it: each epoch's token-bucketed batches (shuffled by
the run's seed and the epoch, corpora drawn by their temperature), this rank's shard of them,
pairs changed as people type under data.augment and a segmentation drawn anew for every batch
under data.spm_alpha; loaders that start where a resumed run stopped."""

from __future__ import annotations

import logging

from mt_transformer.config import Config
from mt_transformer.data.augment import PairAugmenter
from mt_transformer.data.batching import batch_loader, corpus_rows, drawn_batch_tokens, lengths, token_batches
from mt_transformer.data.prepare import SubwordEncoder
from mt_transformer.errors import UserError
from mt_transformer.training import distributed

log = logging.getLogger(__name__)


class TrainingBatches:
    def __init__(
        self,
        config: Config,
        dataset,
        tokenizer_dir: str,
        corpus_sizes: list[int],
        processes: distributed.Processes,
    ):
        """`dataset`: the encoded training pairs, the corpora laid end to end with `corpus_sizes`
        pairs each; `tokenizer_dir`: where the run's tokenizer is, for drawing segmentations."""
        self.data, self.train, self.processes = config.data, config.train, processes
        self.corpus_sizes = list(corpus_sizes)
        self.src_lens, self.tgt_lens = lengths(dataset)
        self.pairs, self.resample, self.batch_tokens = self._segmentation(dataset, tokenizer_dir)
        self._last_epoch = (None, [])  # (epoch, its batches): asked for again at a run's start

    def _segmentation(self, dataset, tokenizer_dir: str):
        """The columns the loader reads, what changes and encodes each batch anew under
        data.augment or data.spm_alpha (None without them), and the tokens of the usual
        segmentation per batch."""
        alpha, train, data = self.data.spm_alpha, self.train, self.data
        augment = [data.augment_of(corpus) for corpus in data.corpus_list()]
        if not alpha and not any(a.active for a in augment):
            return dataset.select_columns(["src_ids", "tgt_ids"]), None, train.max_tokens
        encoder = SubwordEncoder(tokenizer_dir, alpha)
        resample = PairAugmenter(encoder, augment, self.corpus_sizes, data.tags)
        columns = dataset.select_columns(["src_ids", "tgt_ids", "src", "tgt"])
        if not alpha:  # changed pairs are a few: batches hold them within train.max_tokens (batching.py)
            return columns, resample, train.max_tokens
        batch_tokens, inflation = drawn_batch_tokens(dataset, encoder, train.max_tokens, train.seed)
        if self.processes.is_main:
            log.info(
                "data.spm_alpha: drawn segmentations are %.2fx as long; batches are formed at %d tokens of the "
                "usual segmentation so that drawn ones hold at most train.max_tokens=%d",
                inflation,
                batch_tokens,
                train.max_tokens,
            )
        return columns, resample, batch_tokens

    def epoch(self, epoch: int) -> list:
        """This rank's batches (arrays of row indices) of `epoch`."""
        if self._last_epoch[0] != epoch:
            self._last_epoch = (epoch, self._draw_epoch(epoch))
        return self._last_epoch[1]

    def _draw_epoch(self, epoch: int) -> list:
        seed = self.train.seed
        rows = corpus_rows(self.corpus_sizes, self.data.sampling_temperature, seed, epoch)
        if rows is None:
            batches = token_batches(self.src_lens, self.tgt_lens, self.batch_tokens, seed, epoch)
        else:
            found = token_batches(self.src_lens[rows], self.tgt_lens[rows], self.batch_tokens, seed, epoch)
            batches = [rows[b] for b in found]
        if len(batches) < self.processes.world_size:
            raise UserError(
                f"train.max_tokens: the training data makes {len(batches)} batches, fewer than the "
                f"{self.processes.world_size} processes; use fewer processes or a smaller train.max_tokens"
            )
        return distributed.shard(batches, self.processes)

    def loader(self, batches: list, epoch: int, cuda: bool):
        """The padded batches of `batches` (the rest of an epoch), loaded by train.num_workers."""
        train = self.train
        return batch_loader(
            self.pairs,
            batches,
            train.num_workers,
            cuda,
            self.resample,
            self.data.max_len,
            train.max_tokens,
            draw_seed=(train.seed, epoch),
        )
