"""The training step's loss under mixed precision and its gradient scaler."""

import pytest
import torch

from conftest import tiny_model
from mt_transformer.config import TrainConfig
from mt_transformer.data.batching import Batch
from mt_transformer.devices import autocast
from mt_transformer.errors import UserError
from mt_transformer.model.transformer import Transformer
from mt_transformer.special_tokens import PAD_ID
from mt_transformer.training.loss import label_smoothed_loss
from mt_transformer.training.state import TrainerState
from mt_transformer.training.step import FP16_INITIAL_SCALE, TrainingStep, fused_adam, optimizer_for, training_loss


def confident_model_and_batch() -> tuple[Transformer, Batch]:
    """A tiny model whose output layer is confident: most probabilities are far below 6e-8, the
    smallest fp16 number, so their gradients vanish if computed in fp16 before the loss scale."""
    torch.manual_seed(0)
    model = tiny_model(40, 40, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, dropout=0.0)
    with torch.no_grad():
        model.output.weight.mul_(40)
    src = torch.randint(4, 40, (3, 6))
    tgt = torch.randint(4, 40, (3, 6))
    tgt[2, 4:] = PAD_ID
    return model, Batch(src, tgt, tgt)


def test_fp16_output_layer_gradients_keep_values_below_the_fp16_range():
    model, batch = confident_model_and_batch()
    scale = FP16_INITIAL_SCALE
    (scale * training_loss(model, batch, 0.0, "fp16")).backward()
    fused = model.output.weight.grad / scale
    model.zero_grad()

    # the reference: the same fp16 forward pass, the logits and the loss in float32
    with autocast(batch.src.device, "fp16"):
        states = model(batch.src, batch.tgt_in)
    logits = states.float() @ model.output.weight.t()
    probabilities = logits.softmax(-1)
    assert (probabilities < 6e-8).float().mean() > 0.5  # the case this test is about
    (scale * label_smoothed_loss(logits, batch.tgt_out, 0.0)).backward()
    reference = model.output.weight.grad / scale

    small = reference.abs() < 1e-7
    assert small.sum() > 0
    # fp16 keeps about 3 significant digits; an fp16 gradient would be 0 here (100% off)
    error = (fused[small] - reference[small]).norm() / reference[small].norm()
    assert error < 1e-2, error


def test_the_fp16_loss_scale_starts_low_and_bf16_has_none():
    model = torch.nn.Linear(2, 2)
    _, _, scaler = optimizer_for(model, TrainConfig(precision="fp16"), 2, torch.device("cpu"))
    assert scaler.is_enabled() and scaler.get_scale() == FP16_INITIAL_SCALE == 128
    _, _, scaler = optimizer_for(model, TrainConfig(precision="bf16"), 2, torch.device("cpu"))
    assert not scaler.is_enabled()


def test_adam_is_fused_where_the_device_takes_it_and_an_update_moves_the_weights():
    torch.manual_seed(0)
    model = tiny_model(40, 40, d_model=16, n_heads=2, d_ff=32, encoder_layers=1, decoder_layers=1, dropout=0.0)
    train = TrainConfig(precision="fp32", device="cpu", warmup=1)  # a first update of lr 0.25
    device = torch.device("cpu")
    optimizer, scheduler, scaler = optimizer_for(model, train, 16, device)
    assert optimizer.param_groups[0]["fused"] == fused_adam(device)
    step = TrainingStep(model, optimizer, scheduler, scaler, train, TrainerState(), device)
    before = model.encoder[0].ffn.linear1.weight.detach().clone()
    src = torch.randint(4, 40, (3, 6))
    assert step([Batch(src, src, src)]) is not None
    assert not torch.allclose(before, model.encoder[0].ffn.linear1.weight, atol=0.01)


def test_adamw_decays_matrices_by_lr_times_weight_decay_and_spares_biases_and_norms():
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3))
    train = TrainConfig(
        optimizer="adamw", weight_decay=0.1, schedule="budget", decay="constant", warmup_fraction=0.0, peak_lr=0.5
    )
    optimizer, _, _ = optimizer_for(model, train, 3, torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)  # no gradient: only the decay moves a weight
    optimizer.step()
    weight, bias, gain, shift = (p.detach() for p in model.parameters())
    assert torch.allclose(weight, before[0] * (1 - 0.5 * 0.1))
    for after, start in zip((bias, gain, shift), before[1:]):
        assert torch.equal(after, start)


def test_adam_weight_decay_is_an_l2_gradient_term():
    model = torch.nn.Linear(3, 3)
    train = TrainConfig(weight_decay=0.1, schedule="budget", decay="constant", warmup_fraction=0.0, peak_lr=0.5)
    optimizer, _, _ = optimizer_for(model, train, 3, torch.device("cpu"))
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    # Adam normalizes the L2 term: each nonzero weight moves by about lr, the bias too
    for after, start in zip(model.parameters(), before):
        moved = (after.detach() - start).abs()
        assert torch.allclose(moved[start != 0], torch.full_like(moved[start != 0], 0.5), rtol=1e-3)


def test_resuming_with_the_other_optimizer_is_a_user_error():
    model = torch.nn.Linear(3, 3)
    device = torch.device("cpu")
    saved = optimizer_for(model, TrainConfig(), 3, device)[0].state_dict()
    optimizer, scheduler, scaler = optimizer_for(model, TrainConfig(optimizer="adamw"), 3, device)
    step = TrainingStep(model, optimizer, scheduler, scaler, TrainConfig(optimizer="adamw"), TrainerState(), device)
    with pytest.raises(UserError, match="train.optimizer"):
        step.load_optimizer_state(saved)
