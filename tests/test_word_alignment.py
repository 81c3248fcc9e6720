"""Word alignments for train.guided_alignment: eflomal's links symmetrized, turned into attention
targets over subword positions, and the loss that teaches a head them."""

from __future__ import annotations

import math
import random

import pytest
import torch

from conftest import run_cli, tiny_config, write_config
from mt_transformer.data.attention_targets import GuidedTargets, attention_targets, word_positions, word_starts
from mt_transformer.data.batching import collate
from mt_transformer.data.word_alignment import align_words, grow_diag_final_and
from mt_transformer.special_tokens import EOS_ID, PAD_ID
from mt_transformer.training.loss import alignment_loss

# ids 0-3 special; 4 "<2de>" a target tag; 5, 6, 7 begin words; 8, 9 continue them
PIECES = ["<pad>", "<unk>", "<s>", "</s>", "<2de>", "\u2581a", "\u2581b", "\u2581c", "x", "y"]
STARTS = word_starts(PIECES, no_word={4})


def test_grow_diag_final_and_keeps_the_intersection_grows_to_neighbours_then_adds_unaligned_words():
    forward = [(0, 0), (1, 1), (2, 1), (3, 3)]
    reverse = [(0, 0), (1, 1), (1, 2), (4, 4)]
    # (2, 1) and (1, 2) neighbour (1, 1) and align words not yet aligned: grown; (3, 3) and (4, 4)
    # are in one direction only and far from the rest: added at the end, their words unaligned
    assert grow_diag_final_and(forward, reverse) == [(0, 0), (1, 1), (1, 2), (2, 1), (3, 3), (4, 4)]
    # a link of one direction whose two words are aligned already stays out
    assert grow_diag_final_and([(0, 0), (1, 1), (0, 2), (2, 2)], [(0, 0), (1, 1), (2, 2)]) == [(0, 0), (1, 1), (2, 2)]


def test_word_positions_count_words_from_their_first_piece_and_leave_tags_and_specials_out():
    ids = torch.tensor([[4, 5, 8, 6, 9, 9, EOS_ID, PAD_ID]])
    assert word_positions(ids, STARTS).tolist() == [[-1, 0, 0, 1, 1, 1, -1, -1]]


def test_attention_targets_spread_each_target_piece_over_the_pieces_of_its_aligned_source_words():
    src = torch.tensor([[5, 8, 6, EOS_ID], [4, 5, 6, 7]])  # "a·x b", "<2de> a b c"
    tgt_out = torch.tensor([[5, 6, 9, EOS_ID], [5, 8, EOS_ID, PAD_ID]])  # "a b·y", "a·x"
    # row 0: target word 0 <- source word 1, target word 1 <- source words 0 and 1;
    # row 1: target word 0 <- source word 2, and a pair for a word a modifier removed (5, 0)
    found = attention_targets(src, tgt_out, [[1, 0, 0, 1, 1, 1], [2, 0, 5, 0]], (STARTS, STARTS))
    assert found.shape == (2, 4, 4)
    expected_0 = [[0, 0, 1, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 3, 1 / 3, 1 / 3, 0], [0, 0, 0, 0]]
    expected_1 = [[0.0, 0, 0, 1], [0, 0, 0, 1], [0, 0, 0, 0], [0, 0, 0, 0]]
    assert torch.allclose(found[0], torch.tensor(expected_0))
    assert torch.allclose(found[1], torch.tensor(expected_1))


def test_a_word_the_aligner_left_unaligned_can_be_taught_the_sources_eos():
    src = torch.tensor([[5, 6, EOS_ID, PAD_ID]])  # "a b"
    tgt_out = torch.tensor([[5, 6, 7, EOS_ID]])  # "a b c": b unaligned
    links = [[1, 0, 0, 2]]
    free = attention_targets(src, tgt_out, links, (STARTS, STARTS))
    taught = attention_targets(src, tgt_out, links, (STARTS, STARTS), unaligned_to_eos=True)
    assert free[0, 1].tolist() == [0, 0, 0, 0] and taught[0, 1].tolist() == [0, 0, 1, 0]
    assert torch.equal(taught[0, [0, 2, 3]], free[0, [0, 2, 3]])  # aligned words and EOS's row as before


def test_a_collated_batch_keeps_its_attention_targets_through_a_split():
    guided = GuidedTargets((STARTS, STARTS))
    batch = collate([[5, 6], [5, 8, 6, 7]], [[6, 5], [7]], alignments=[[0, 1, 1, 0], [2, 0]], guided=guided)
    assert batch.alignment.shape == (2, 3, 5)
    first, second = batch.split(2)
    assert first.alignment.shape == (1, 3, 3) and second.alignment.shape == (1, 2, 5)
    assert first.alignment[0, 0].tolist() == [0, 1, 0] and second.alignment[0, 0].tolist() == [0, 0, 0, 1, 0]


def test_reading_steps_are_taught_the_links_of_the_piece_they_read_one_row_later():
    args = [[5, 6], [5, 8, 6, 7]], [[6, 5], [7]]
    alignments = [[0, 1, 1, 0], [2, 0]]
    writes = collate(*args, alignments=alignments, guided=GuidedTargets((STARTS, STARTS)))
    reads = collate(*args, alignments=alignments, guided=GuidedTargets((STARTS, STARTS), reads=True))
    assert reads.alignment.shape == writes.alignment.shape == (2, 3, 5)
    # row t reads piece t (after BOS): the row that wrote it, one step later; BOS's row has no link
    assert torch.equal(reads.alignment[:, 1:], writes.alignment[:, :-1])
    assert reads.alignment[:, 0].sum() == 0


def test_the_alignment_loss_is_the_cross_entropy_of_the_taught_heads_and_pulls_them_to_the_links():
    target = torch.tensor([[[1.0, 0.0], [0.5, 0.5], [0.0, 0.0]]])  # (1, tgt 3, src 2); row 2 has no link
    weights = torch.tensor([[[[0.8, 0.2], [0.1, 0.9], [0.5, 0.5]], [[0.6, 0.4], [0.3, 0.7], [0.1, 0.9]]]])
    # head 0 alone: -(log 0.8 + 0.5 log 0.1 + 0.5 log 0.9); both heads: their mean (0.7, 0.2, 0.8)
    assert alignment_loss(weights, target, 1).item() == pytest.approx(
        -(math.log(0.8) + 0.5 * math.log(0.1) + 0.5 * math.log(0.9)), rel=1e-5
    )
    assert alignment_loss(weights, target, 2).item() == pytest.approx(
        -(math.log(0.7) + 0.5 * math.log(0.2) + 0.5 * math.log(0.8)), rel=1e-5
    )
    scores = torch.zeros(1, 1, 3, 2, requires_grad=True)  # attention = softmax(scores)
    optimizer = torch.optim.SGD([scores], lr=1.0)
    for _ in range(50):
        optimizer.zero_grad()
        alignment_loss(scores.softmax(-1), target, 1).backward()
        optimizer.step()
    attention = scores.softmax(-1)[0, 0].detach()
    assert attention[0, 0] > 0.95 and abs(attention[1, 0] - 0.5) < 0.01  # row 2 untaught: unchanged
    assert attention[2].tolist() == [0.5, 0.5]


def test_eflomal_aligns_a_made_up_language_whose_words_come_in_reverse_order():
    """Twenty words, each with its own translation; every target sentence reverses the source's
    order. Most links should be the reversal (eflomal samples: not every one)."""
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(20)]
    sources, targets = [], []
    for _ in range(400):
        words = rng.sample(vocabulary, rng.randint(3, 7))
        sources.append(" ".join(words))
        targets.append(" ".join(w.replace("w", "v").upper() for w in reversed(words)))
    sources.append("")
    targets.append("V1")
    found = align_words(sources, targets)
    assert found[-1] == []
    right = total = 0
    for source, pairs in zip(sources[:-1], found[:-1]):
        n = len(source.split())
        right += sum(t == n - 1 - s for s, t in pairs)
        total += n
    assert right / total > 0.9


def _agreement(translator, sources: list[str], targets: list[str], links: list, head: int | None = None) -> float:
    """The share of the aligner's links that the translator's attention gives teacher-forced: the
    heads that give its alignments, or the last layer's `head`."""
    from mt_transformer.decoding.alignment import aligned_words

    def one_head(srcs, outs):
        return [translator.cross_attention(s, [o], -1, head)[0] for s, o in zip(srcs, outs)]

    outputs = translator.tokenizer.encode_tgt(targets)
    found = aligned_words(translator, translator.source_ids(sources), outputs, None if head is None else one_head)
    right = sum(len(set(pairs) & set(reference)) for (pairs, _, _), reference in zip(found, links))
    return right / sum(len(reference) for reference in links)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["writes", "reads"])
def test_a_run_with_guided_alignment_aligns_its_words_as_the_aligner_does(corpus, tmp_path, step):
    """A tiny run whose last layer's first head is taught eflomal's links: that head (what
    mt-translate --alignment and format html read) agrees with them far more than the others;
    its CTranslate2 conversion reads them at the same step."""
    from mt_transformer.decoding.engines import open_translator

    out = str(tmp_path / "guided")
    guided = {"weight": 1.0, "step": step}
    train = {"guided_alignment": guided, "lr_scale": 0.3, "max_steps": 60, "valid_every": 60}
    data = {"augment": {"typos": 0.3, "noise": 0.05}}  # drawn pairs carry their alignments (noise: none)
    config = tiny_config(corpus, out, train=train, data=data)
    result = run_cli("mt-train", "--config", write_config(tmp_path / "c.yaml", config))
    assert result.returncode == 0, result.stderr
    assert "2000 word-aligned" in result.stderr
    with open(f"{corpus}/train.en", encoding="utf-8") as f_en, open(f"{corpus}/train.de", encoding="utf-8") as f_de:
        sources, targets = [line.strip() for line in f_en][:300], [line.strip() for line in f_de][:300]
    links = align_words(sources, targets)[:60]
    translator = open_translator(out, "torch", "cpu")
    taught = _agreement(translator, sources[:60], targets[:60], links)
    assert taught == _agreement(translator, sources[:60], targets[:60], links, head=0)
    others = [_agreement(translator, sources[:60], targets[:60], links, head=h) for h in (1, 2, 3)]
    assert taught > 0.3 and taught > max(others) + 0.2, (taught, others)
    assert open_translator(out, "ctranslate2", "cpu").alignment_step == (step == "reads")
