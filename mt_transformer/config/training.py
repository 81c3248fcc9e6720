"""The train section of the run configuration (config/sections.py holds the others): the
update loop, its schedule and stopping, checkpoints, precision, and what a run fine-tunes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class GuidedAlignmentConfig:
    """train.guided_alignment: cross-attention taught the word alignments of the training pairs
    (data/word_alignment.py), as Marian's guided-alignment; weight 0, the default: off."""

    weight: float = 0.0  # of the alignment's cross entropy beside the translation loss, per target token
    layer: int = -1  # the decoder layer it teaches, from 0; -1: the last
    heads: int = 1  # the first `heads` heads of that layer, averaged (CTranslate2's alignment_heads)
    # the decoder step whose attention aligns a target word: the one that writes it (Marian's), or
    # the next, which reads it (docs/techniques.md#inline-markup---format-html)
    step: Literal["writes", "reads"] = "writes"
    # target words the aligner leaves unaligned taught the source's EOS, and read as unaligned
    unaligned_to_eos: bool = False


@dataclass(frozen=True)
class LoraConfig:
    """train.lora: low-rank adapters (model/lora.py) on the linear layers named in `targets`, the
    rest of train.init_from's model frozen; checkpoints hold the adapters alone. rank 0: off."""

    rank: int = 0
    alpha: float = 16.0  # the adapters' output is scaled by alpha / rank
    # q_proj, kv_proj, out_proj: every attention's; linear1, linear2: the feed-forward layers'
    targets: tuple[str, ...] = ("q_proj", "kv_proj", "out_proj")

    # the linear layers an adapter may go on, by their names in model/ (tests/test_lora.py holds
    # them to the model's), all but the output projection
    LAYERS = ("q_proj", "kv_proj", "out_proj", "linear1", "linear2")


@dataclass(frozen=True)
class TrainConfig:
    output_dir: str = "runs/default"
    max_tokens: int = 4096
    accumulate: int = 1
    max_steps: int = 100_000
    max_epochs: int = 0  # 0: no limit
    max_minutes: float = 0.0  # 0: no limit
    # the learning-rate schedule (training/schedule.py): noam, the paper's, with lr_scale and
    # warmup; budget, a warmup of warmup_fraction of the run to peak_lr, then a decay that
    # reaches zero when max_steps or max_minutes does: linear all the way, or rsqrt (an inverse
    # square root) or constant, each ending in a linear cooldown over cooldown_fraction of the run
    schedule: Literal["noam", "budget"] = "noam"
    lr_scale: float = 1.0
    warmup: int = 4000
    peak_lr: float = 1e-3
    warmup_fraction: float = 0.1
    decay: Literal["linear", "rsqrt", "constant"] = "linear"
    cooldown_fraction: float = 0.2
    label_smoothing: float = 0.1
    guided_alignment: GuidedAlignmentConfig = GuidedAlignmentConfig()
    # dropout only where the run is expected to read its training data at least this many times
    # (training/dropout_fit.py); 0: always
    dropout_min_epochs: float = 0.0
    # (epochs, rate): a run expected to read its training data at least `epochs` times trains
    # with residual dropout `rate` instead of model.dropout (training/dropout_fit.py); (0, 0): off
    long_run_dropout: tuple[float, float] = (0.0, 0.0)
    # word dropout (model.word_dropout) in a run that long_run_dropout finds long
    long_run_word_dropout: float = 0.0
    # dropout (where the settings above keep it) starts only once this part of the run is spent
    # (training/dropout_fit.py); 0: from the first update
    dropout_from: float = 0.0
    # data.spm_alpha's sampled segmentations only where the run is expected to read its training
    # data at least this many times (training/sampling_fit.py); 0: always
    sampling_min_epochs: float = 0.0
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    # adam: weight_decay is an L2 term added to the gradient (torch's Adam); adamw: decoupled,
    # each update shrinks the matrices by lr * weight_decay (biases and norms are not decayed)
    optimizer: Literal["adam", "adamw"] = "adam"
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0: no clipping
    max_bad_updates: int = 20  # stop after this many non-finite updates in a row; 0: never
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: training/precision.py
    # bf16: weights and gradients in bf16, Adam's moments in fp32, updates rounded stochastically
    # (training/bf16_adam.py): 12 bytes a parameter against 16; needs precision bf16
    weights_dtype: Literal["fp32", "bf16"] = "fp32"
    device: str = "auto"
    threads: int = 0  # CPU threads; 0: torch's default
    seed: int = 1
    log_every: int = 100
    valid_every: int = 1000  # validate, then save a checkpoint
    save_every: int = 0  # also save a checkpoint every N updates, without validating; 0: only at validations
    valid_max_sentences: int = 0  # 0: the whole valid set for BLEU
    keep_last: int = 5
    patience: int = 0  # stop after this many validations in a row without a better valid BLEU; 0: never
    num_workers: int = 0
    compile: bool = False  # run the model under torch.compile
    # keep no layer's inner activations for the backward pass, compute them again there: less
    # memory for more compute (docs/configs.md)
    checkpoint_activations: bool = False
    # under torchrun: ddp replicates the model on every process; fsdp shards weights, gradients and
    # Adam's state over them (FSDP2, a unit per layer: training/sharding.py)
    distributed: Literal["ddp", "fsdp"] = "ddp"
    tensorboard: bool = False  # also log to {output_dir}/tensorboard (needs the tensorboard package)
    curves: bool = True  # redraw {output_dir}/curves.png after validations and at the end (matplotlib)
    init_from: str | None = None  # fine-tune: start from this run or checkpoint's weights and tokenizer
    init_from_reset: bool = True  # with init_from: a fresh optimizer; false keeps the parent's optimizer state
    lora: LoraConfig = LoraConfig()  # with init_from: train adapters only (docs/exports.md#fine-tuning-nllb)
