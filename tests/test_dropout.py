import math

import pytest
import torch

from mt_transformer.model.dropout import Dropout, WordDropout, apply_dropout, cpu_dropout

# n draws of a Bernoulli(q) fraction have standard deviation sqrt(q (1 - q) / n); six of them
# bound a correct mask's deviation on any host (the draws depend on the seed only), while a
# wrong threshold or a reused slice moves the fractions by 1e-2 or more.
N = 1_000_000


def six_sigma(q: float, n: int = N) -> float:
    return 6 * math.sqrt(q * (1 - q) / n)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drops_the_expected_fraction_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    y = cpu_dropout(torch.ones(N), p)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < six_sigma(p)
    kept = y[y != 0]
    assert torch.all(kept == kept[0])  # one scale for every kept element
    assert abs(kept[0].item() - 1 / (1 - p)) < 1e-4  # the inverse of the kept fraction
    assert abs(y.mean().item() - 1.0) < six_sigma(p) / (1 - p)


def test_neighbouring_elements_are_dropped_independently():
    # four elements share one 64-bit draw: pairs within it, and across draws, must still be
    # independent, P(both dropped) = p^2
    torch.manual_seed(1)
    p = 0.5
    dropped = cpu_dropout(torch.ones(N), p) == 0
    for gap in (1, 2, 3, 4, 5):
        both = (dropped[:-gap] & dropped[gap:]).float().mean().item()
        assert abs(both - p * p) < six_sigma(p * p, N - gap), gap


def test_the_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(2)
    x = torch.randn(7, 13, requires_grad=True)  # 91 elements: not a multiple of the four per draw
    y = cpu_dropout(x, 0.2)
    y.backward(torch.ones_like(y))
    expected = torch.where(y == 0, 0.0, 1 / (1 - 0.2))
    assert torch.allclose(x.grad, expected, rtol=1e-4, atol=0)


def test_seeded_masks_repeat_and_successive_masks_differ():
    x = torch.ones(4, 64)
    torch.manual_seed(3)
    first, second = cpu_dropout(x, 0.5), cpu_dropout(x, 0.5)
    torch.manual_seed(3)
    assert torch.equal(cpu_dropout(x, 0.5), first)
    assert not torch.equal(first, second)


def test_shapes_dtypes_and_strided_inputs():
    torch.manual_seed(4)
    x = torch.randn(6, 10).t()  # not contiguous
    y = cpu_dropout(x, 0.5)
    assert y.shape == (10, 6) and torch.all((y == 0) | torch.isclose(y, 2 * x))
    assert cpu_dropout(torch.ones(3, 5, dtype=torch.bfloat16), 0.5).dtype == torch.bfloat16
    assert cpu_dropout(torch.ones(0, 4), 0.5).shape == (0, 4)


def test_the_extremes_and_the_module():
    x = torch.randn(5, 8)
    assert torch.equal(cpu_dropout(x, 1.0), torch.zeros_like(x))
    assert apply_dropout(x, 0.0) is x
    layer = Dropout(0.5)
    assert layer.eval()(x) is x  # identity at evaluation
    assert (layer.train()(torch.ones(1000)) == 0).any()
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.5)


def test_word_dropout_zeroes_whole_words_at_its_rate_and_nothing_at_evaluation():
    torch.manual_seed(5)
    layer = WordDropout(0.2)
    x = torch.randn(500, 400, 3) + 5.0  # no element is zero by chance
    y = layer.train()(x)
    zeroed = (y == 0).all(-1)  # (batch, len): whole embeddings
    assert torch.all(zeroed | (y == x).all(-1))  # a word is dropped whole or kept unscaled
    assert abs(zeroed.float().mean().item() - 0.2) < six_sigma(0.2, 500 * 400)
    assert layer.eval()(x) is x
    assert WordDropout(0.0).train()(x) is x
    with pytest.raises(ValueError, match="word dropout probability"):
        WordDropout(1.0)
