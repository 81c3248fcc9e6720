"""The linear layers' weights as a search runs them, prepared once and reused while they are unchanged.

A decoding step multiplies a few rows (a sentence's beam) by every weight matrix of the decoder,
so its matrix products read far more weight bytes than they do arithmetic, and how the weights
are laid out and stored decides their speed (docs/benchmarks.md, "The decoding engine against
CTranslate2"):

    fp32, x86 CPU   each weight reordered for oneDNN's matrix product (the layout it would
                    otherwise make at every call)
    int8, CPU       each weight in int8 with one scale per output channel, activations quantized
                    per call to uint8 (the x86 quantized engine's dynamic linear: a quarter of the
                    bytes, products in integers)
    small weights   (under PACK_FROM_ELEMENTS) the plain float32 product, faster than either
    bf16/fp16       each weight cast once, for autocast's products (autocast inside inference_mode
                    keeps no cast copies and would cast every weight again at every step)

`prepared_linears(model, precision)` applies one of these to every nn.Linear of a model (or of an
ensemble's models) for the length of one search and restores the layers after it, so that
training, alignments and attention views see the model's own float32 parameters.
"""

from __future__ import annotations

import platform
import warnings
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

from mt_transformer.devices import PRECISIONS
from mt_transformer.errors import UserError

# prepared weights by layer and form, kept while the weight is unchanged: in-place changes through
# the parameter (load_state_dict, a step of the training optimizer) bump its version and force a new
# one; writes through `.data`, or by a fused optimizer kernel left to itself, would go unseen
_PREPARED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@contextmanager
def prepared_linears(model: nn.Module, precision: str) -> Iterator[None]:
    """For the body of the `with`: every linear layer of `model` computing with its weight in the
    form that `precision` (fp32, int8, bf16 or fp16; bf16/fp16 under the caller's autocast) runs
    fastest on the model's device. Layers that cannot take that form keep their own product.
    A model is searched by one thread at a time."""
    if precision in ("bf16", "fp16"):
        with linear_weights_cast(model, PRECISIONS[precision]):
            yield
        return
    layers = [m for m in _linears(model) if m.weight.dtype == torch.float32]
    prepare = {"fp32": _packed_product, "int8": _int8_product}[precision]
    replaced = []
    try:
        for layer in layers:
            product = prepare(layer)
            if product is not None:
                replaced.append(layer)
                layer.forward = product  # an instance attribute: nn.Module.__call__ finds it first
        yield
    finally:
        for layer in replaced:
            del layer.forward


_LINEARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _linears(model: nn.Module) -> list[nn.Linear]:
    """The model's linear layers, found once per model (walking its modules takes longer than a
    decoding step's attention)."""
    if model not in _LINEARS:
        _LINEARS[model] = [m for m in model.modules() if isinstance(m, nn.Linear)]
    return _LINEARS[model]


def _cached(layer: nn.Linear, form: str, make: Callable[[], object]):
    weight = layer.weight
    key = (form, weight._version, weight.data_ptr(), None if layer.bias is None else layer.bias._version)
    entry = _PREPARED.get(layer)
    if entry is None or entry[0] != key:
        entry = _PREPARED[layer] = (key, make())
    return entry[1]


def onednn_packing_available(weight: torch.Tensor) -> bool:
    return (
        weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and platform.machine().lower() in ("x86_64", "amd64")
        and torch.backends.mkldnn.is_available()
    )


# oneDNN's packed product and the int8 one cost ~30 us a call whatever their size, the plain one
# less for a small weight: both from this many weight elements, where they were faster at 4 rows
# on Zen 3 (a 128 x 512 weight: plain 26 us, packed 38, int8 30; 256 x 768: plain 74, packed 60,
# int8 ~35; docs/benchmarks.md). Smaller layers keep their plain float32 product.
PACK_FROM_ELEMENTS = 128 * 1024


def _packed_product(layer: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x @ W^T + b with W packed for oneDNN; None where the weight is small or the CPU or this
    torch build lacks it."""
    if layer.weight.numel() < PACK_FROM_ELEMENTS or not onednn_packing_available(layer.weight):
        return None
    bias = None if layer.bias is None else layer.bias.detach()
    try:
        packed = _cached(layer, "onednn", lambda: torch.ops.mkldnn._reorder_linear_weight(layer.weight.detach(), None))

        def product(x: torch.Tensor) -> torch.Tensor:
            return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

        product(layer.weight.new_zeros(1, layer.in_features))  # an operator that differs fails here, not mid-search
    except (AttributeError, RuntimeError, TypeError):
        return None
    return product


def quantize_per_channel(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 of a (out, in) weight: int8 values and one float32 scale per output row,
    weight ~= values * scale[:, None], the largest magnitude of each row mapping to 127."""
    scale = weight.detach().abs().amax(dim=1).clamp(min=1e-12) / 127.0  # (out,)
    values = torch.round(weight.detach() / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return values, scale


def _int8_weight(layer: nn.Linear):
    values, scale = quantize_per_channel(layer.weight)
    with warnings.catch_warnings():  # torch's quantized tensor factories warn that they are deprecated
        warnings.simplefilter("ignore")
        quantized = torch._make_per_channel_quantized_tensor(values, scale.double(), torch.zeros_like(scale).long(), 0)
    return torch.ops.quantized.linear_prepack(quantized, None if layer.bias is None else layer.bias.detach())


def _int8_product(layer: nn.Linear) -> Callable[[torch.Tensor], torch.Tensor] | None:
    """x @ W^T + b with W in int8 (per-channel scales) and x quantized to uint8 per call; None
    for a small weight."""
    if layer.weight.numel() < PACK_FROM_ELEMENTS:
        return None
    if layer.weight.device.type != "cpu":
        raise UserError("decode.precision int8: for the CPU; on a GPU use bf16 or fp16")
    try:
        packed = _cached(layer, "int8", lambda: _int8_weight(layer))
    except (AttributeError, RuntimeError) as error:
        raise UserError(f"decode.precision int8: this torch build has no int8 linear product ({error})") from None

    def product(x: torch.Tensor) -> torch.Tensor:
        # reduce_range: 7-bit activations, so that CPUs without VNNI cannot overflow their 16-bit sums
        return torch.ops.quantized.linear_dynamic(x.float(), packed, True)

    return product


@contextmanager
def linear_weights_cast(model: nn.Module, dtype: torch.dtype) -> Iterator[None]:
    """For one search under autocast to `dtype` (bf16 or fp16): every linear layer's weight and
    bias cast to it once, on entry (on a Zen 4 CPU, autocast's own casts took a tenth to a sixth
    of a single line's translation; docs/benchmarks.md). The products are autocast's own, bit for
    bit: it casts the inputs and finds the weights already cast. The model's own parameters are
    back on exit."""
    if dtype == torch.float32:
        yield
        return
    swapped = []
    for layer in _linears(model):
        if layer.weight.dtype == torch.float32:
            originals = dict(layer._parameters)
            swapped.append((layer, originals))
            for name, value in originals.items():
                if value is not None:
                    layer._parameters[name] = value.detach().to(dtype)
    try:
        yield
    finally:
        for layer, parameters in swapped:
            layer._parameters.update(parameters)
