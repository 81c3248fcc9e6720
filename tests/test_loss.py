"""The label-smoothed loss: against the formula, and the fused form against the plain one."""

import math

import pytest
import torch

from conftest import FP32_TOLERANCE
from mt_transformer.special_tokens import PAD_ID
from mt_transformer.training.loss import (
    ROW_MULTIPLE,
    LogitBuffers,
    blockwise_losses,
    label_smoothed_loss,
    linear_cross_entropy,
    padded_rows,
)


def test_label_smoothed_loss_matches_the_formula():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 7)
    target = torch.tensor([[4, 5, PAD_ID], [6, PAD_ID, PAD_ID]])
    eps = 0.1
    expected = 0.0
    log_probs = logits.log_softmax(-1)
    for b in range(2):
        for t in range(3):
            y = target[b, t].item()
            if y == PAD_ID:
                continue
            # (1 - eps) on the reference plus eps spread uniformly over the vocabulary
            expected += -(1 - eps) * log_probs[b, t, y] - eps / 7 * log_probs[b, t].sum()
    assert math.isclose(label_smoothed_loss(logits, target, eps).item(), expected.item(), rel_tol=1e-5)
    nll = label_smoothed_loss(logits, target, 0.0).item()
    manual = -(log_probs[0, 0, 4] + log_probs[0, 1, 5] + log_probs[1, 0, 6]).item()
    assert math.isclose(nll, manual, rel_tol=1e-5)


@pytest.mark.parametrize("smoothing, block_rows, with_bias", [(0.1, 4, False), (0.0, 1024, True), (0.3, 7, True)])
def test_fused_loss_and_gradients_equal_the_plain_ones(smoothing, block_rows, with_bias):
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 16, requires_grad=True)
    weight = torch.randn(11, 16, requires_grad=True)
    bias = torch.randn(11, requires_grad=True) if with_bias else None
    target = torch.randint(4, 11, (3, 5))
    target[1, 3:] = PAD_ID
    target[2, 1:] = PAD_ID
    inputs = (hidden, weight, bias) if with_bias else (hidden, weight)
    plain = label_smoothed_loss(hidden @ weight.t() + (bias if with_bias else 0), target, smoothing)
    plain_grads = torch.autograd.grad(plain * 2.5, inputs)
    fused = linear_cross_entropy(hidden, weight, target, smoothing, torch.float32, block_rows, bias=bias)
    fused_grads = torch.autograd.grad(fused * 2.5, inputs)  # the outer gradient is applied too
    torch.testing.assert_close(fused, plain, **FP32_TOLERANCE)
    for ours, theirs in zip(fused_grads, plain_grads):
        torch.testing.assert_close(ours, theirs, **FP32_TOLERANCE)
    assert fused_grads[0][2, 1:].abs().sum() == 0  # padding positions get no gradient


def test_fused_loss_in_bf16_is_close_to_float32():
    torch.manual_seed(0)
    hidden, weight = torch.randn(40, 32), torch.randn(50, 32) * 0.2
    target = torch.randint(4, 50, (40,))[None]
    exact = linear_cross_entropy(hidden[None], weight, target, 0.1)
    bf16 = linear_cross_entropy(hidden[None], weight, target, 0.1, torch.bfloat16)
    assert bf16.dtype == torch.float32 and math.isclose(bf16.item(), exact.item(), rel_tol=2e-2)


def test_bf16_blocks_padded_on_the_cpu_give_their_rows_gradients_and_nothing_from_the_padding():
    cpu, bf16 = torch.device("cpu"), torch.bfloat16
    assert padded_rows(37, bf16, cpu) == ROW_MULTIPLE and padded_rows(37, torch.float32, cpu) == 37
    torch.manual_seed(0)
    hidden = torch.randn(1, 37, 16, requires_grad=True)
    weight = (0.2 * torch.randn(50, 16)).requires_grad_()
    target = torch.randint(4, 50, (1, 37))
    buffers = LogitBuffers()
    for buffer in buffers.get(ROW_MULTIPLE, 50, bf16, cpu):
        buffer.fill_(float("nan"))  # what an earlier batch might have left in the padding rows
    fused = linear_cross_entropy(hidden, weight, target, 0.1, bf16, buffers=buffers)
    fused_grads = torch.autograd.grad(fused, (hidden, weight))
    plain = label_smoothed_loss(hidden @ weight.t(), target, 0.1)
    plain_grads = torch.autograd.grad(plain, (hidden, weight))
    assert math.isclose(fused.item(), plain.item(), rel_tol=2e-2)
    for ours, theirs in zip(fused_grads, plain_grads):
        assert ours.shape == theirs.shape and torch.isfinite(ours).all()
        assert (ours - theirs).norm() < 2e-2 * theirs.norm()


def test_buffers_kept_across_calls_change_nothing():
    """One LogitBuffers through calls of other sizes, precisions and vocabularies: each result as
    with fresh buffers, and a call's results untouched by the next."""
    torch.manual_seed(0)
    buffers = LogitBuffers()
    earlier = []
    bf16, fp32 = torch.bfloat16, torch.float32
    for tokens, vocab, dtype in [(6, 11, bf16), (20, 11, bf16), (20, 11, fp32), (9, 13, fp32)]:
        hidden = torch.randn(1, tokens, 16, requires_grad=True)
        weight = torch.randn(vocab, 16, requires_grad=True)
        target = torch.randint(4, vocab, (1, tokens))
        fresh = linear_cross_entropy(hidden, weight, target, 0.1, dtype, 8)
        fresh_grads = torch.autograd.grad(fresh, (hidden, weight))
        kept = linear_cross_entropy(hidden, weight, target, 0.1, dtype, 8, buffers)
        kept_grads = torch.autograd.grad(kept, (hidden, weight))
        assert torch.equal(kept, fresh) and all(map(torch.equal, kept_grads, fresh_grads))
        earlier.append((kept, kept_grads, fresh, fresh_grads))
    for kept, kept_grads, fresh, fresh_grads in earlier:
        assert torch.equal(kept, fresh) and all(map(torch.equal, kept_grads, fresh_grads))


@pytest.mark.parametrize("block_rows, with_bias", [(3, False), (1024, True)])
def test_blockwise_validation_losses_equal_the_plain_ones(block_rows, with_bias):
    torch.manual_seed(0)
    hidden, weight, bias = torch.randn(3, 5, 16), torch.randn(11, 16), torch.randn(11) if with_bias else None
    target = torch.randint(4, 11, (3, 5))
    target[1, 2:] = PAD_ID
    loss, nll = blockwise_losses(hidden, weight, target, 0.1, torch.float32, block_rows, bias=bias)
    logits = hidden @ weight.t() + (bias if with_bias else 0)
    assert math.isclose(loss, label_smoothed_loss(logits, target, 0.1).item(), rel_tol=1e-4)
    assert math.isclose(nll, label_smoothed_loss(logits, target, 0.0).item(), rel_tol=1e-4)


def test_a_large_vocabulary_takes_fewer_rows_a_block():
    from mt_transformer.training.loss import rows_per_block

    assert rows_per_block(1024, 8_000) == 1024  # 32 MB of logits
    assert rows_per_block(1024, 256_206) == 130  # NLLB: 128 MiB, not 1 GiB
    assert rows_per_block(1024, 10_000_000) == 64 and rows_per_block(3, 256_206) == 3
