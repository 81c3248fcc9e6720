"""Adam for bf16 weights (train.weights_dtype: bf16): the moments in fp32, the update computed in
fp32 and rounded stochastically to bf16.

bf16 keeps 8 bits of mantissa: an update below half a unit in the last place of a weight (about
0.2% of it) would round away every time, and a fine-tuning rate of 1e-5 is far below that.
Rounding up with the probability of the remainder (Gupta et al., 2015) keeps the expected weight
exact, so such updates still add up. Weights, gradients and moments take 2 + 2 + 8 = 12 bytes a
parameter against fp32's 16; there is no fp32 copy of the weights.
"""

from __future__ import annotations

import torch

CHUNK = 1 << 24  # elements updated at once: 64 MB fp32 temporaries, not copies of a 1 GB embedding


def to_bf16_matrices(model: torch.nn.Module) -> None:
    """The model's matrices in bf16; its norms (which autocast runs in fp32) and position tables stay."""
    for parameter in model.parameters():
        if parameter.dim() >= 2:
            parameter.data = parameter.data.to(torch.bfloat16)


def stochastic_round(x: torch.Tensor) -> torch.Tensor:
    """fp32 `x` to bf16, each value rounded up or down with the probability of its remainder."""
    bits = x.view(torch.int32)
    noise = torch.randint_like(bits, 0, 1 << 16)  # a uniform draw over the 16 bits bf16 drops
    return ((bits + noise) & -(1 << 16)).view(torch.float32).to(torch.bfloat16)  # exact: low bits zero


class StochasticRoundingAdam(torch.optim.Optimizer):
    """Adam (`decoupled`: AdamW) as torch's computes it, for bf16 parameters: fp32 moments, each
    new weight stochastically rounded (fp32 parameters, the norms', updated as they are)."""

    def __init__(self, params, lr: float, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay=0.0, decoupled=False):
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay, "decoupled": decoupled}
        super().__init__(params, defaults)

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's, which casts the moments to their parameter's dtype, with the saved fp32 moments
        put back (a resumed run goes on exactly)."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        for parameter, i in zip((p for group in self.param_groups for p in group["params"]), ids):
            for key in ("exp_avg", "exp_avg_sq"):
                if key in saved.get(i, {}):
                    self.state[parameter][key] = saved[i][key].to(parameter.device, torch.float32)

    @torch.no_grad()
    def step(self):
        trained = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for _, p in trained:  # every moment before any temporary: they stay together in memory
            if not self.state[p]:
                self.state[p].update(
                    step=torch.zeros((), dtype=torch.float32),
                    exp_avg=torch.zeros_like(p, dtype=torch.float32),
                    exp_avg_sq=torch.zeros_like(p, dtype=torch.float32),
                )
        for group, p in trained:
            state = self.state[p]
            state["step"] += 1
            flat = [t.view(-1) for t in (p, p.grad, state["exp_avg"], state["exp_avg_sq"])]
            for start in range(0, p.numel(), CHUNK):  # fp32 temporaries of one chunk at a time
                self._update(group, state["step"].item(), *(t[start : start + CHUNK] for t in flat))

    @staticmethod
    def _update(group: dict, t: float, p, grad, exp_avg, exp_avg_sq) -> None:
        (beta1, beta2), lr, decay = group["betas"], group["lr"], group["weight_decay"]
        weight, grad = p.float(), grad.float()
        if decay and group["decoupled"]:
            weight.mul_(1 - lr * decay)
        elif decay:
            grad = grad.add(weight, alpha=decay)
        exp_avg.lerp_(grad, 1 - beta1)  # m = beta1 m + (1 - beta1) g
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denominator = (exp_avg_sq / (1 - beta2**t)).sqrt_().add_(group["eps"])
        weight.addcdiv_(exp_avg, denominator, value=-lr / (1 - beta1**t))
        p.copy_(stochastic_round(weight) if p.dtype == torch.bfloat16 else weight)
