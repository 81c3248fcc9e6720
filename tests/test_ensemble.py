"""Ensembles: a model with itself translates as the model alone; models of another tokenizer
are refused."""

import os

import pytest

from conftest import ROOT, run_cli, tiny_model, translator
from mt_transformer.decoding.engines import open_translator

OTHER_TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "checkpoint_v1")


@pytest.mark.parametrize("beam, mode", [(1, "logprob"), (3, "logprob"), (3, "prob")])
def test_a_model_ensembled_with_itself_translates_as_alone(trained_run, corpus, beam, mode):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:30]
    alone = translator(trained_run, beam_size=beam, n_best=beam)(lines)
    twice = open_translator([trained_run, trained_run], "torch", "cpu", ensemble_mode=mode, beam_size=beam, n_best=beam)
    together = twice(lines)
    assert [[t.text for t in r] for r in together] == [[t.text for t in r] for r in alone]
    for ours, theirs in zip(together, alone):
        assert [t.log_prob for t in ours] == pytest.approx([t.log_prob for t in theirs], abs=1e-4)


def test_mt_translate_ensembles_several_checkpoints_of_one_tokenizer(trained_run):
    args = ["--checkpoint", trained_run, trained_run, "--device", "cpu", "--beam", "2"]
    ensembled = run_cli("mt-translate", *args, input="a red apple\nTom sold it.\n")
    alone = translator(trained_run, beam_size=2)(["a red apple", "Tom sold it."])
    assert ensembled.returncode == 0, ensembled.stderr
    assert ensembled.stdout.splitlines() == [r[0].text for r in alone]

    mixed = run_cli("mt-translate", "--checkpoint", trained_run, OTHER_TOKENIZER, "--device", "cpu", input="x\n")
    assert mixed.returncode == 2
    assert mixed.stderr.strip().endswith("have different tokenizers; an ensemble needs models of one tokenizer")


def test_two_models_combine_as_the_mean_of_log_probabilities_or_of_probabilities():
    import torch

    from mt_transformer.decoding.ensemble import Ensemble

    torch.manual_seed(0)
    a = tiny_model(30, 30, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1).eval()
    b = tiny_model(30, 30, d_model=24, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=2).eval()
    src, tgt = torch.randint(4, 30, (2, 5)), torch.randint(4, 30, (2, 4))
    mask = (src != 0)[:, None, None, :]
    with torch.no_grad():
        each = [m.logits(m.decode(tgt, m.encode(src, mask), mask)[0]).log_softmax(-1) for m in (a, b)]
        for mode, expected in (
            ("logprob", (each[0] + each[1]) / 2),
            ("prob", ((each[0].exp() + each[1].exp()) / 2).log()),
        ):
            ensemble = Ensemble([a, b], mode)
            combined = ensemble.logits(ensemble.decode(tgt, ensemble.encode(src, mask), mask)[0])
            torch.testing.assert_close(combined, expected, rtol=1e-4, atol=1e-5)
