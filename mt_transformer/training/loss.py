"""Label-smoothed cross entropy (section 5.4 of the paper), plain and fused with the output projection.

Training uses the fused form: the output projection, log-softmax, loss and their gradients are
computed together, a block of rows at a time, so the (tokens, vocab) logits never exist whole.
Same loss and gradients as `label_smoothed_loss(hidden @ weight.T + bias, ...)` to float rounding
(tests/test_loss.py), and faster, since the plain form spends its time in memory-bound passes
over the logits (docs/benchmarks.md, "Performance decisions").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mt_transformer.special_tokens import PAD_ID

BLOCK_ROWS = 1024  # rows of a block at most (see BLOCK_BYTES)
# bf16/fp16 products on a CPU run through oneDNN, which builds a kernel for every new row count
# (several times the cost of the product itself); the blocks' rows are
# padded to a multiple of this, so that a run meets a few row counts and reuses their kernels
# (docs/benchmarks.md, "Performance decisions")
ROW_MULTIPLE = 64

# and at most this many bytes of float32 logits a block: 130 rows of NLLB's 256,206 pieces, where
# 1,024 rows (1 GB in the logits and their gradient) would outweigh a LoRA run's activations
BLOCK_BYTES = 128 << 20


def rows_per_block(block_rows: int, vocab: int) -> int:
    return min(block_rows, max(ROW_MULTIPLE, BLOCK_BYTES // (4 * vocab)))


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Sum over non-pad target tokens of the cross entropy against a label-smoothed target:
    (1 - smoothing) on the reference token plus smoothing / vocab on every token.

    logits: (batch, tgt_len, vocab); target: (batch, tgt_len).
    """
    return F.cross_entropy(
        logits.flatten(0, 1).float(), target.flatten(), ignore_index=PAD_ID, label_smoothing=smoothing, reduction="sum"
    )


def _block_losses(logits: torch.Tensor, target: torch.Tensor, smoothing: float):
    """Per-row label-smoothed loss and NLL of float32 logits (rows, vocab), and their softmax,
    written over the logits: one exp per element, where logsumexp and then the softmax take two."""
    # -log p(t) (1 - s) - sum_v log p(v) s / V  =  log_z - (1 - s) x_t - s / V sum_v x_v
    reference = logits.gather(1, target[:, None]).squeeze(1)  # (rows,)
    total = logits.sum(-1)  # (rows,)
    peak = logits.amax(-1, keepdim=True)  # (rows, 1)
    probs = logits.sub_(peak).exp_()  # (rows, vocab), not yet normalised
    norm = probs.sum(-1, keepdim=True)  # (rows, 1)
    log_z = (peak + norm.log()).squeeze(1)  # (rows,)
    loss = log_z - (1 - smoothing) * reference - smoothing / logits.size(1) * total
    return loss, log_z - reference, probs.div_(norm)


class LogitBuffers:
    """The fused loss's per-block logits, kept from one call to the next.

    A block's logits are (block_rows, vocab): megabytes that, allocated afresh each block, the CPU
    pays for again in page faults on first touch. Reused, bf16 updates run faster
    (docs/benchmarks.md, "Performance decisions"); fp32 runs at the same speed.
    """

    def __init__(self):
        self.low: torch.Tensor | None = None  # (rows, vocab) in the matrix products' dtype
        self.high: torch.Tensor | None = None  # (rows, vocab) float32; the same tensor in fp32

    def get(self, rows: int, vocab: int, dtype: torch.dtype, device: torch.device):
        """(low, high) views of (rows, vocab), reallocated only when they are too small or differ."""
        low = self.low
        if low is None or low.size(0) < rows or low.size(1) != vocab or low.dtype != dtype or low.device != device:
            self.low = torch.empty(rows, vocab, dtype=dtype, device=device)
            self.high = self.low if dtype == torch.float32 else torch.empty(rows, vocab, device=device)
        return self.low[:rows], self.high[:rows]


def padded_rows(rows: int, dtype: torch.dtype, device: torch.device) -> int:
    """The rows a block's products run on: `rows`, rounded up to ROW_MULTIPLE for bf16/fp16 on a CPU."""
    if dtype == torch.float32 or device.type != "cpu":
        return rows
    return -(-rows // ROW_MULTIPLE) * ROW_MULTIPLE


def _block_logits(h, w, bias, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    """h @ w.T (+ bias, in float32) computed in w's dtype into `low`'s first rows, returned as
    float32 in `high`'s (low itself in fp32). h: (rows, d_model); bias: (vocab,) or None;
    low, high: (>= rows, vocab) from LogitBuffers.get."""
    rows = h.size(0)
    torch.mm(h, w.t(), out=low[:rows])  # (rows, vocab)
    logits = high[:rows] if low.dtype == torch.float32 else high[:rows].copy_(low[:rows])
    return logits if bias is None else logits.add_(bias)


class _LinearCrossEntropy(torch.autograd.Function):
    """Loss summed over rows; the gradients are computed in the forward pass, block by block."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, target, smoothing: float, dtype: torch.dtype, block_rows: int, buffers):
        # hidden: (tokens, d_model); weight: (vocab, d_model); bias: (vocab,) or None; target: (tokens,)
        vocab = weight.size(0)
        w, b = weight.to(dtype), None if bias is None else bias.float()
        loss = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden)
        # a frozen output projection (train.lora) gets no (vocab, d_model) gradient
        grad_weight = (
            torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        )
        grad_bias = None if bias is None else torch.zeros(vocab, dtype=torch.float32, device=bias.device)
        device = hidden.device
        low, high = buffers.get(padded_rows(min(block_rows, hidden.size(0)), dtype, device), vocab, dtype, device)
        for start in range(0, hidden.size(0), block_rows):
            t = target[start : start + block_rows]  # (rows,)
            rows = t.size(0)
            h = hidden[start : start + block_rows].to(dtype)  # (rows, d_model)
            padded = padded_rows(rows, dtype, device)
            if padded > rows:
                h = F.pad(h, (0, 0, 0, padded - rows))  # (padded, d_model), zero rows below `rows`
            logits = _block_logits(h, w, b, low, high)[:rows]  # (rows, vocab) float32
            block_loss, _, probs = _block_losses(logits, t, smoothing)
            loss += block_loss.sum()
            # d loss / d logits = softmax - the smoothed target distribution
            grad = probs.sub_(smoothing / vocab)  # (rows, vocab)
            grad[torch.arange(rows, device=t.device), t] -= 1 - smoothing
            if grad_bias is not None:
                grad_bias += grad.sum(0)  # (vocab,)
            if dtype != torch.float32:
                # (padded, vocab) in the products' dtype; the padding rows keep their logits, 0
                grad = low[:padded]
                grad[:rows].copy_(probs)
            grad_hidden[start : start + block_rows] = (grad @ w)[:rows]  # (rows, d_model)
            if grad_weight is not None and dtype == torch.float32:
                grad_weight.addmm_(grad.t(), h)  # (vocab, d_model), no product apart
            elif grad_weight is not None:
                grad_weight += grad.t() @ h  # cast as it is added: no float32 copy of the product
        ctx.save_for_backward(
            grad_hidden,
            None if grad_weight is None else grad_weight.to(weight.dtype),
            None if bias is None else grad_bias.to(bias.dtype),
        )
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        grad_bias = None if grad_bias is None else grad_bias * grad_loss
        grad_weight = None if grad_weight is None else grad_weight * grad_loss
        return grad_hidden * grad_loss, grad_weight, grad_bias, None, None, None, None, None


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    smoothing: float,
    dtype: torch.dtype = torch.float32,
    block_rows: int = BLOCK_ROWS,
    buffers: LogitBuffers | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """label_smoothed_loss(hidden @ weight.T + bias, target, smoothing), without the full logits.

    hidden: (batch, tgt_len, d_model) decoder states; weight: (vocab, d_model) output projection;
    bias: (vocab,) or None; target: (batch, tgt_len) with PAD_ID where there is no token. Matrix
    products run in `dtype` (bf16/fp16 for mixed precision), the bias, softmax and loss in
    float32. `buffers`, kept by the caller from one call to the next, saves allocating each
    block's logits afresh.
    """
    keep = target != PAD_ID
    buffers = LogitBuffers() if buffers is None else buffers
    rows = rows_per_block(block_rows, weight.size(0))
    return _LinearCrossEntropy.apply(hidden[keep], weight, bias, target[keep], smoothing, dtype, rows, buffers)


@torch.no_grad()
def blockwise_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    target: torch.Tensor,
    smoothing: float,
    dtype: torch.dtype = torch.float32,
    block_rows: int = BLOCK_ROWS,
    bias: torch.Tensor | None = None,
) -> tuple[float, float]:
    """(label-smoothed loss, NLL), each summed over the non-pad target tokens, of the output
    projection `hidden @ weight.T + bias`, without gradients and a block of rows at a time: for
    validation, where the logits of a whole batch (8,192 tokens x 37k words: 1.2 GB in float32)
    need not exist. Shapes as in linear_cross_entropy."""
    keep = target != PAD_ID
    hidden, target, w = hidden[keep], target[keep], weight.to(dtype)
    block_rows = rows_per_block(block_rows, w.size(0))
    b = None if bias is None else bias.float()
    loss, nll = (torch.zeros((), dtype=torch.float32, device=hidden.device) for _ in range(2))
    low, high = LogitBuffers().get(min(block_rows, hidden.size(0)), w.size(0), dtype, hidden.device)
    for start in range(0, hidden.size(0), block_rows):
        t = target[start : start + block_rows]  # (rows,)
        logits = _block_logits(hidden[start : start + block_rows].to(dtype), w, b, low, high)  # (rows, vocab)
        block_loss, block_nll, _ = _block_losses(logits, t, smoothing)
        loss += block_loss.sum()
        nll += block_nll.sum()
    return float(loss), float(nll)


def alignment_loss(weights: torch.Tensor, target: torch.Tensor, heads: int) -> torch.Tensor:
    """train.guided_alignment's loss: the cross entropy of the mean attention of the first `heads`
    heads (weights: (batch, all heads, tgt_len, src_len)) against `target` (batch, tgt_len,
    src_len; each aligned row sums to 1, other rows are 0), summed over the target positions."""
    attention = weights[:, :heads].float().mean(dim=1)  # (batch, tgt_len, src_len)
    return -(target * attention.clamp(min=1e-9).log()).sum()
