"""The decoding engine's step computes what the model's decode computes (decoding/engine.py)."""

import pytest
import torch

from conftest import perturbed_model
from mt_transformer.config import ModelConfig
from mt_transformer.data.special_tokens import BOS_ID, EOS_ID, PAD_ID
from mt_transformer.decoding import engine as engine_module
from mt_transformer.decoding.beam import beam_search
from mt_transformer.decoding.engine import Engine, engine_for, restack
from mt_transformer.decoding.ensemble import Ensemble
from mt_transformer.decoding.greedy import greedy_search
from mt_transformer.model.masks import padding_mask

VOCAB = 40


def model_of(norm: str = "post", **changes):
    config = ModelConfig(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=3, norm=norm, **changes)
    return perturbed_model(config, VOCAB, VOCAB, True)


def padded_sources():
    torch.manual_seed(3)
    src = torch.randint(4, VOCAB, (3, 9))
    src[0, 6:] = PAD_ID  # shorter inputs padded: the cross-attention must not look past their ends
    src[2, 4:] = PAD_ID
    return src, padding_mask(src, PAD_ID)


@pytest.mark.parametrize("sdpa_work", [engine_module.SDPA_WORK, 0])  # SDPA, and the two batched products
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_each_step_gives_the_model_decode_states_through_reorders_and_dropped_sentences(norm, sdpa_work, monkeypatch):
    monkeypatch.setattr(engine_module, "SDPA_WORK", sdpa_work)
    model = model_of(norm)
    engine = Engine(model)
    restack(engine)
    src, src_mask = padded_sources()
    with torch.inference_mode():
        memory = model.encode(src, src_mask)
        ours, theirs = engine.new_cache(), model.new_cache()
        tokens = torch.full((3, 1), BOS_ID)
        rows, sentences = 3, torch.arange(3)
        for step in range(20):
            first = step == 0
            a, _ = engine.decode(tokens, memory if first else None, src_mask, ours)
            b, _ = model.decode(tokens, memory if first else None, src_mask, theirs)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            if step == 0:  # widened to two rows per sentence, as beam search does
                order = torch.arange(rows).repeat_interleave(2)
            elif step == 7:  # the second sentence leaves, its rows with it
                sentences = torch.tensor([0, 2])
                order = torch.tensor([1, 0, 4, 4])
            else:  # rows reordered within their sentence
                order = torch.arange(tokens.size(0)).view(-1, 2).flip(1).reshape(-1)
            keep = sentences if step == 7 else None
            ours.select(order, keep)
            theirs.select(order, keep)
            if keep is not None:
                src_mask = src_mask[keep]
                sentences = torch.arange(2)
            tokens = torch.randint(4, VOCAB, (order.numel(), 1))


@pytest.mark.parametrize("changes", [{}, {"norm": "pre", "activation": "swish"}, {"tie_embeddings": False}])
def test_greedy_and_beam_search_find_the_same_hypotheses_through_the_engine(changes):
    model = model_of(**changes)
    engine = Engine(model)
    restack(engine)
    src, src_mask = padded_sources()
    limits = torch.tensor([12, 7, 15])
    for search, options in ((greedy_search, {}), (beam_search, {"beam_size": 3, "alpha": 0.6, "n_best": 3})):
        found = [search(m, src, src_mask, limits, BOS_ID, EOS_ID, **options) for m in (engine, model)]
        flat = [[h for row in f for h in (row if isinstance(row, list) else [row])] for f in found]
        assert [h.tokens for h in flat[0]] == [h.tokens for h in flat[1]]
        assert [h.score for h in flat[0]] == pytest.approx([h.score for h in flat[1]], abs=1e-4)


def test_an_ensemble_searches_through_its_members_engines():
    members = [model_of(), model_of("pre")]
    ensemble = Ensemble(members)
    engines = engine_for(ensemble)
    assert isinstance(engines, Ensemble) and all(isinstance(m, Engine) for m in engines.members)
    restack(engines)
    src, src_mask = padded_sources()
    limits = torch.tensor([10, 10, 10])
    options = {"beam_size": 2, "alpha": 0.6, "n_best": 1}
    ours = beam_search(engines, src, src_mask, limits, BOS_ID, EOS_ID, **options)
    theirs = beam_search(ensemble, src, src_mask, limits, BOS_ID, EOS_ID, **options)
    assert [h[0].tokens for h in ours] == [h[0].tokens for h in theirs]


def test_the_stacked_weights_follow_the_model_and_leave_its_gradients_alone():
    model, other = model_of(), model_of("post", dropout=0.0)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05)
    engine = Engine(model)
    assert all(p.requires_grad for p in model.parameters())  # the engine is built beside a model in training
    src, src_mask = padded_sources()

    def first_states():
        restack(engine)
        with torch.inference_mode():
            memory = model.encode(src, src_mask)
            return engine.decode(torch.full((3, 1), BOS_ID), memory, src_mask, engine.new_cache())[0]

    before = first_states()
    model.load_state_dict(other.state_dict())  # as resuming, averaging and training's updates change them
    after = first_states()
    with torch.inference_mode():
        memory = model.encode(src, src_mask)
        expected = model.decode(torch.full((3, 1), BOS_ID), memory, src_mask, model.new_cache())[0]
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before, after)


def test_the_step_takes_one_position_and_gives_no_weights():
    model = model_of()
    engine = Engine(model)
    restack(engine)
    src, src_mask = padded_sources()
    memory = model.encode(src, src_mask)
    with pytest.raises(ValueError, match="one new position"):
        engine.decode(torch.full((3, 2), BOS_ID), memory, src_mask, engine.new_cache())
    # without a cache it is the model's teacher-forced decode, weights included
    states, weights = engine.decode(torch.full((3, 2), BOS_ID), memory, src_mask, None, need_weights=True)
    assert states.shape == (3, 2, 32) and weights[0].shape == (3, 4, 2, 9)
