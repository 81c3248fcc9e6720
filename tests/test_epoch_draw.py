import numpy as np
from datasets import Dataset

from mt_transformer.data.batching import batch_loader, token_batches
from mt_transformer.data.epoch_draw import WINDOW, DrawnPairs, draw_epoch


def pairs_and_twice_the_pieces(n=300, seed=0):
    """Encoded pairs whose text has one character per usual piece, and a sampler that draws
    segmentations of twice the usual pieces (7s and 8s) from any seed."""
    rng = np.random.default_rng(seed)
    src = rng.integers(1, 60, n)
    tgt = np.maximum(1, src + rng.integers(-3, 4, n))
    rows = Dataset.from_dict(
        {
            "src_ids": [[5] * n for n in src.tolist()],
            "tgt_ids": [[6] * n for n in tgt.tolist()],
            "src": ["a" * n for n in src.tolist()],
            "tgt": ["b" * n for n in tgt.tolist()],
        }
    )

    def twice_the_pieces(pairs, seed, indices):
        return {
            "src_ids": [[7] * (2 * len(x)) for x in pairs["src"]],
            "tgt_ids": [[8] * (2 * len(x)) for x in pairs["tgt"]],
        }

    return src, tgt, rows, twice_the_pieces


def test_drawn_pairs_give_back_each_pairs_ids_in_order():
    pairs = DrawnPairs([np.array([1, 2], np.int32), np.array([], np.int32)], [np.array([3], np.int32)] * 2)
    assert pairs[[1, 0]] == {"src_ids": [[], [1, 2]], "tgt_ids": [[3], [3]]}
    assert pairs.src_lens.tolist() == [2, 0] and len(pairs) == 2
    aligned = DrawnPairs([np.array([1], np.int32)] * 2, [np.array([3], np.int32)] * 2, [np.array([0, 0], np.int32)] * 2)
    assert aligned[[1]] == {"src_ids": [[1]], "tgt_ids": [[3]], "alignment": [[0, 0]]}


def test_batches_of_drawn_pairs_fill_the_budget_by_their_drawn_lengths():
    src, tgt, rows, twice_the_pieces = pairs_and_twice_the_pieces()
    order = np.random.default_rng(1).permutation(len(src))
    pairs, _ = draw_epoch(rows, order, twice_the_pieces, longest=99, seed=(1, 0))
    assert pairs.src_lens.tolist() == [2 * n if 2 * n <= 99 else n for n in src[order].tolist()]
    assert pairs[[0]]["src_ids"][0][0] == (7 if 2 * src[order[0]] <= 99 else 5)  # too long: the usual ids
    batches = token_batches(pairs.src_lens, pairs.tgt_lens, 400, seed=1)
    sizes = []
    for batch in batch_loader(pairs, batches):
        assert batch.src.numel() <= 400 and batch.tgt_in.numel() <= 400
        sizes.append(max(batch.src.numel(), batch.tgt_in.numel()))
    assert np.mean(sizes) > 0.85 * 400  # cut by the drawn lengths: no room left for what a draw adds


def test_an_epoch_draws_the_same_pairs_with_any_number_of_workers_and_anew_the_next(corpus, tmp_path):
    from mt_transformer.config import AugmentConfig
    from mt_transformer.data.augment import PairAugmenter
    from mt_transformer.data.prepare import SubwordEncoder
    from mt_transformer.data.sentencepiece_training import train_sentencepiece

    model = str(tmp_path / "spm.model")
    lines = open(f"{corpus}/train.en", encoding="utf-8").read().splitlines()
    train_sentencepiece(lines, model, 150, "unigram", 1.0, 10_000, seed=1, byte_fallback=False)
    count = WINDOW + 40  # two windows: each of its own seed
    lines = (lines * (count // len(lines) + 1))[:count]
    usual = SubwordEncoder(str(tmp_path))({"src": lines, "tgt": lines})
    rows = Dataset.from_dict({"src": lines, "tgt": lines, **usual})
    changes = AugmentConfig(upper_case=0.3, typos=0.5, remove_end_punct=0.5)
    for alpha, augment in ((0.3, AugmentConfig()), (0.0, changes), (0.3, changes)):
        resample = PairAugmenter(SubwordEncoder(str(tmp_path), alpha=alpha), [augment], [count])

        def drawn(workers, epoch, resample=resample):
            pairs, _ = draw_epoch(rows, np.arange(count), resample, 500, (1, epoch), workers)
            return pairs[list(range(count))]["src_ids"]

        in_process = drawn(0, epoch=0)
        assert drawn(2, epoch=0) == in_process  # two workers, a window each
        assert drawn(0, epoch=1) != in_process  # another epoch draws anew
        assert sum(a != b for a, b in zip(in_process, usual["src_ids"])) > count // 10
