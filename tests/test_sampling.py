"""Sampling: the draws follow the (reshaped) distribution, are reproducible with a seed, and
reduce to greedy search when only the best token may be drawn."""

import pytest
import torch

from conftest import run_cli, translator
from mt_transformer.decoding.sampling import Sampler

CPU = torch.device("cpu")


def draws(sampler: Sampler, logits: torch.Tensor, n: int) -> torch.Tensor:
    """Token counts over n draws from one row of logits."""
    tokens = sampler(logits.expand(n, -1).clone())
    return torch.bincount(tokens, minlength=logits.size(-1))


def test_draws_follow_the_distribution_its_temperature_and_its_cuts():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, float("-inf")]])
    n = 20000
    for temperature in (1.0, 0.5, 2.0):
        counts = draws(Sampler(0, 1.0, temperature, seed=3, device=CPU), logits, n)
        expected = (logits / temperature).softmax(-1)[0] * n
        assert counts[4] == 0  # a forbidden token is never drawn
        assert torch.allclose(counts.float(), expected, atol=4 * expected.sqrt().max())  # 4 standard deviations
    assert set(draws(Sampler(2, 1.0, 1.0, seed=3, device=CPU), logits, n).nonzero().view(-1).tolist()) == {0, 1}
    # probabilities 0.64, 0.24, 0.09, 0.03: the first two hold 0.88, so p = 0.8 keeps them and p = 0.9 three
    assert set(draws(Sampler(0, 0.8, 1.0, seed=3, device=CPU), logits, n).nonzero().view(-1).tolist()) == {0, 1}
    assert set(draws(Sampler(0, 0.9, 1.0, seed=3, device=CPU), logits, n).nonzero().view(-1).tolist()) == {0, 1, 2}


def test_the_same_seed_draws_the_same_translations(trained_run, corpus):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:20]
    settings = dict(sampling=True, temperature=1.5, max_len_b=10)
    first = [r[0].text for r in translator(trained_run, seed=5, **settings)(lines)]
    again = [r[0].text for r in translator(trained_run, seed=5, **settings)(lines)]
    other = [r[0].text for r in translator(trained_run, seed=6, **settings)(lines)]
    assert first == again and first != other


@pytest.mark.parametrize("cut", [{"topk": 1}, {"topp": 1e-6}])
def test_drawing_only_the_best_token_is_greedy_search(trained_run, corpus, cut):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:20]
    greedy = translator(trained_run, beam_size=1)(lines)
    drawn = translator(trained_run, sampling=True, **cut)(lines)
    assert [r[0].text for r in drawn] == [r[0].text for r in greedy]
    assert [r[0].log_prob for r in drawn] == pytest.approx([r[0].log_prob for r in greedy], abs=1e-4)


def test_mt_translate_draws_an_n_best_list_by_sampling(trained_run):
    args = ["--checkpoint", trained_run, "--sampling", "--nbest", "3", "--scores", "--seed", "2", "--device", "cpu"]
    result = run_cli("mt-translate", *args, input="a red apple\nTom sold it.\n")
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert [row[0] for row in rows] == ["0", "0", "0", "1", "1", "1"]
    scores = [float(row[1]) for row in rows]
    assert scores[:3] == sorted(scores[:3], reverse=True) and scores[3:] == sorted(scores[3:], reverse=True)

    result = run_cli("mt-translate", "--checkpoint", trained_run, "--sampling", "--topp", "1.5", input="x\n")
    assert result.returncode == 2 and result.stderr.strip() == "error: --topp: must be in (0, 1], got 1.5"


def test_sampling_with_a_beam_is_a_one_line_error(trained_run):
    result = run_cli("mt-translate", "--checkpoint", trained_run, "--sampling", "--beam", "4", input="x\n")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: --beam: 4 with sampling, which draws one token at a time; leave it at 1")
