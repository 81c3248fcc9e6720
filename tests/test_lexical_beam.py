"""The beam search's side of lexical constraints: the masks that enforce them, dynamic beam allocation."""

import torch
from test_constraints import Vocabulary

from mt_transformer.decoding.constraints import Constraints, PieceIndex
from mt_transformer.decoding.lexical_beam import LexicalBeam, allocate

EOS = 2


def test_the_beam_is_shared_among_banks_and_spare_slots_go_to_the_most_progress():
    # 5 slots over banks 0..2: 1, 2, 2 (the remainder to the highest banks)
    assert allocate([0, 0, 0, 1, 1, 1, 2, 2, 2], beam=5, top_bank=2) == [0, 3, 4, 6, 7]
    # bank 2 has no candidates: its two slots go to bank 1, then bank 0
    assert allocate([0, 0, 0, 1, 1, 1], beam=5, top_bank=2) == [0, 1, 3, 4, 5]
    # no constraints: one bank, the best `beam`
    assert allocate([0] * 6, beam=4, top_bank=0) == [0, 1, 2, 3]
    assert allocate([1, 0], beam=4, top_bank=1) == [0, 1]


def test_a_row_ends_only_holding_every_phrase_or_at_its_limit_and_never_completes_a_phrase_to_avoid():
    vocabulary = Vocabulary(["▁red", "▁apple", "▁dog"])  # ids 3, 4, 5
    index = PieceIndex(vocabulary)
    beam = LexicalBeam([Constraints(include=((3, 4),), avoid=("▁dog",))], EOS, index)
    log_probs = torch.zeros(1, 6)
    beam.restrict(log_probs, at_limit=None)
    assert torch.isinf(log_probs[0, [EOS, 5]]).all() and torch.isfinite(log_probs[0, [3, 4]]).all()
    at_limit = torch.zeros(1, 6)
    beam.restrict(at_limit, at_limit=torch.tensor([True]))
    assert torch.isfinite(at_limit[0, EOS]) and torch.isinf(at_limit[0, 5])
    done = LexicalBeam([Constraints(include=((3,),))], EOS, index)
    done.progress[0][0] = done.progress[0][0].advance(3, "▁red", done.constraints[0])
    complete = torch.zeros(1, 6)
    done.restrict(complete, at_limit=None)
    assert torch.isfinite(complete).all()
