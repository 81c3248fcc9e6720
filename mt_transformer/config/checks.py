"""The config's cross-field and range checks, and whether the data files it names exist.

Each failed check raises `ConfigError` with one line that names the key.
"""

from __future__ import annotations

import os

from mt_transformer.config.sections import (
    Config,
    CorpusConfig,
    DataConfig,
    DecodeConfig,
    ModelConfig,
)
from mt_transformer.config.training import TrainConfig
from mt_transformer.errors import ConfigError


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def validate(config: Config) -> None:
    """Cross-field and range checks; file existence is checked by `check_data_files`."""
    for section, names in (
        ("data", ["max_len", "num_proc", "spm_max_sentences"]),
        ("model", ["d_model", "n_heads", "d_ff", "encoder_layers", "decoder_layers", "max_positions"]),
        ("train", ["max_tokens", "accumulate", "max_steps", "warmup", "log_every", "valid_every"]),
        ("decode", ["beam_size", "n_best", "max_tokens"]),
    ):
        for name in names:
            value = getattr(getattr(config, section), name)
            _check(value > 0, f"{section}.{name}: must be positive, got {value}")
    for name in (
        "max_epochs",
        "max_minutes",
        "keep_last",
        "num_workers",
        "threads",
        "valid_max_sentences",
        "save_every",
        "max_bad_updates",
        "patience",
    ):
        value = getattr(config.train, name)
        _check(value >= 0, f"train.{name}: must be zero or positive, got {value}")
    _check_data(config.data)
    _check_model(config.model, config.data)
    _check_train(config.train, config.data)
    _check_guided_alignment(config.train.guided_alignment, config.model)
    _check_lora(config.train)
    _check_decode(config.decode)


def _check_guided_alignment(guided, model: ModelConfig) -> None:
    key = "train.guided_alignment"
    _check(guided.weight >= 0, f"{key}.weight: must be 0 (off) or more, got {guided.weight}")
    layers = model.decoder_layers
    _check(
        -layers <= guided.layer < layers,
        f"{key}.layer: a decoder layer from 0 to {layers - 1} or -1, got {guided.layer}",
    )
    _check(
        1 <= guided.heads <= model.n_heads, f"{key}.heads: from 1 to model.n_heads {model.n_heads}, got {guided.heads}"
    )


def _check_lora(train: TrainConfig) -> None:
    fsdp = train.distributed == "fsdp"
    _check(not (fsdp and train.lora.rank), "train.distributed: fsdp shards a whole model's training; unset train.lora")
    _check(
        not (fsdp and train.weights_dtype == "bf16"),
        "train.distributed: fsdp keeps fp32 weights; unset train.weights_dtype",
    )
    lora, names = train.lora, train.lora.LAYERS
    _check(lora.rank >= 0, f"train.lora.rank: must be 0 (off) or more, got {lora.rank}")
    if lora.rank:
        _check(lora.alpha > 0, f"train.lora.alpha: must be positive, got {lora.alpha}")
        unknown = [t for t in lora.targets if t not in names]
        _check(lora.targets and not unknown, f"train.lora.targets: each one of {', '.join(names)}, got {unknown}")
        _check(train.init_from, "train.lora: adapts a trained model: name it in train.init_from")
        _check(train.init_from_reset, "train.lora: trains new adapters; train.init_from_reset must be true")


def _check_augment(augment, key: str) -> None:
    for name, value in augment.shares.items() if augment is not None else ():
        _check(0 <= value <= 1, f"{key}.{name}: a share of pairs, between 0 and 1, got {value}")


def _check_data(data: DataConfig) -> None:
    _check(
        data.vocab_size == 0 or data.vocab_size >= 16,
        f"data.vocab_size: must be at least 16, or 0 to size it from the data, got {data.vocab_size}",
    )
    _check(
        0 <= data.character_coverage <= 1,
        f"data.character_coverage: must be in (0, 1], or 0 to choose from the text, got {data.character_coverage}",
    )
    _check(data.max_ratio >= 1, f"data.max_ratio: must be at least 1, got {data.max_ratio}")
    _check(0 <= data.spm_alpha < 1, f"data.spm_alpha: must be in [0, 1), got {data.spm_alpha}")
    for k, corpus in enumerate(data.corpora or ()):
        _check_augment(corpus.augment, f"data.corpora[{k}].augment")
        if corpus.clean is not None:
            corpus.clean.check(f"data.corpora[{k}].clean")
    _check_augment(data.augment, "data.augment")
    if data.clean is not None:
        data.clean.check("data.clean")
    _check(data.teacher_nbest >= 1, f"data.teacher_nbest: must be at least 1, got {data.teacher_nbest}")
    _check(
        data.teacher_select != "chrf" or data.teacher_nbest > 1,
        "data.teacher_select: chrf chooses among the teacher's n-best; set data.teacher_nbest above 1",
    )
    _check(
        data.teacher_min_log_prob is None or data.teacher_min_log_prob < 0,
        f"data.teacher_min_log_prob: must be negative (a log-probability per token), got {data.teacher_min_log_prob}",
    )
    check_corpora(data)


def _check_model(model: ModelConfig, data: DataConfig) -> None:
    _check(
        model.d_model % model.n_heads == 0,
        f"model.d_model: {model.d_model} is not divisible by model.n_heads ({model.n_heads})",
    )
    _check(
        model.positions == "learned" or model.d_model % 2 == 0,
        f"model.d_model: must be even for sinusoidal positions, got {model.d_model}",
    )
    _check(0 <= model.dropout < 1, f"model.dropout: must be in [0, 1), got {model.dropout}")
    _check(
        0 <= model.attention_dropout < 1, f"model.attention_dropout: must be in [0, 1), got {model.attention_dropout}"
    )
    _check(0 <= model.word_dropout < 1, f"model.word_dropout: must be in [0, 1), got {model.word_dropout}")
    _check(
        model.max_positions > data.max_len,
        f"model.max_positions: must exceed data.max_len ({data.max_len}), got {model.max_positions}",
    )


def _check_train(train: TrainConfig, data: DataConfig) -> None:
    _check(
        train.max_tokens >= data.max_len + 1,
        f"train.max_tokens: must be at least data.max_len + 1 ({data.max_len + 1}), got {train.max_tokens}",
    )
    _check(train.lr_scale > 0, f"train.lr_scale: must be positive, got {train.lr_scale}")
    _check(train.peak_lr > 0, f"train.peak_lr: must be positive, got {train.peak_lr}")
    _check(
        train.dropout_min_epochs >= 0, f"train.dropout_min_epochs: must be at least 0, got {train.dropout_min_epochs}"
    )
    long_epochs, long_rate = train.long_run_dropout
    _check(
        long_epochs >= 0 and 0 <= long_rate < 1,
        f"train.long_run_dropout: expected [epochs >= 0, a rate in [0, 1)], got {list(train.long_run_dropout)}",
    )
    _check(
        0 <= train.long_run_word_dropout < 1,
        f"train.long_run_word_dropout: must be in [0, 1), got {train.long_run_word_dropout}",
    )
    _check(0 <= train.dropout_from < 1, f"train.dropout_from: must be in [0, 1), got {train.dropout_from}")
    _check(
        train.sampling_min_epochs >= 0,
        f"train.sampling_min_epochs: must be at least 0, got {train.sampling_min_epochs}",
    )
    _check(0 <= train.warmup_fraction < 1, f"train.warmup_fraction: must be in [0, 1), got {train.warmup_fraction}")
    _check(
        train.decay != "rsqrt" or train.warmup_fraction > 0,
        "train.warmup_fraction: decay rsqrt falls from the end of the warmup, so it must be positive",
    )
    _check(
        train.decay == "linear" or 0 < train.cooldown_fraction <= 1 - train.warmup_fraction,
        f"train.cooldown_fraction: must be in (0, 1 - warmup_fraction], got {train.cooldown_fraction}",
    )
    _check(0 <= train.label_smoothing < 1, f"train.label_smoothing: must be in [0, 1), got {train.label_smoothing}")
    _check(
        all(0 <= b < 1 for b in train.adam_betas),
        f"train.adam_betas: each must be in [0, 1), got {list(train.adam_betas)}",
    )
    _check(train.adam_eps > 0, f"train.adam_eps: must be positive, got {train.adam_eps}")
    _check(train.weight_decay >= 0, f"train.weight_decay: must be zero or positive, got {train.weight_decay}")
    _check(
        train.weights_dtype == "fp32" or train.precision == "bf16",
        "train.weights_dtype: bf16 weights compute in bf16: set train.precision: bf16",
    )
    _check(train.clip_norm >= 0, f"train.clip_norm: must be zero or positive, got {train.clip_norm}")
    _check(
        train.device == "auto" or train.device == "cpu" or train.device.startswith("cuda"),
        f"train.device: expected auto, cpu or cuda[:N], got {train.device!r}",
    )


def _check_decode(decode: DecodeConfig) -> None:
    _check(
        decode.sampling or decode.n_best <= decode.beam_size,
        f"decode.n_best: {decode.n_best} exceeds decode.beam_size ({decode.beam_size})",
    )
    _check(
        not (decode.sampling and decode.beam_size > 1),
        f"decode.beam_size: {decode.beam_size} with sampling, which draws one token at a time; leave it at 1",
    )
    _check(decode.topk >= 0, f"decode.topk: must be zero or positive, got {decode.topk}")
    _check(
        decode.no_repeat_ngram >= 0, f"decode.no_repeat_ngram: must be zero or positive, got {decode.no_repeat_ngram}"
    )
    _check(0 < decode.topp <= 1, f"decode.topp: must be in (0, 1], got {decode.topp}")
    _check(decode.temperature > 0, f"decode.temperature: must be positive, got {decode.temperature}")
    _check(decode.alpha >= 0, f"decode.alpha: must be zero or positive, got {decode.alpha}")
    _check(decode.max_len_a >= 0 and decode.max_len_b >= 0, "decode.max_len_a: max_len_a and max_len_b must be >= 0")
    _check(decode.max_input_len >= 0, f"decode.max_input_len: must be zero or positive, got {decode.max_input_len}")


def check_corpora(data: DataConfig) -> None:
    """Each corpus's languages, tag and hub name; with data.corpora, no splits of the section's own."""
    _check(
        data.sampling_temperature > 0, f"data.sampling_temperature: must be positive, got {data.sampling_temperature}"
    )
    for c, key in corpus_keys(data):
        _check(c.src_lang != c.tgt_lang, f"{key}.tgt_lang: must differ from {key}.src_lang ({c.src_lang!r})")
        _check(c.format != "hub" or bool(c.hub_name), f"{key}.hub_name: required when {key}.format is hub")
        _check(c.tag is None or _one_word(c.tag), f"{key}.tag: must be one token without spaces, got {c.tag!r}")
        _check(
            not data.target_tags or _one_word(c.tgt_lang),
            f"{key}.tgt_lang: {c.tgt_lang!r} cannot name a target tag <2xx>: it must be one word",
        )
    _check(
        not (data.language_tokens and (data.target_tags or data.spm_alpha)),
        "data.language_tokens: not with data.target_tags or data.spm_alpha (the language tokens say the target)",
    )
    _check(
        not (data.language_tokens and any(data.augment_of(c).active for c in data.corpus_list())),
        "data.augment: not with data.language_tokens (an NLLB or M2M100 import)",
    )
    if data.corpora:
        for key in ("train", "valid", "test", "hub_name", "tag", "teacher"):
            _check(not getattr(data, key), f"data.{key}: with data.corpora, set it in each corpus instead")


def _one_word(text: str) -> bool:
    return text != "" and not any(ch.isspace() for ch in text)


def corpus_keys(data: DataConfig) -> list[tuple[CorpusConfig, str]]:
    """Each of data.corpus_list() with the config key that names it in messages: data, or data.corpora[i]."""
    return [(c, "data" if c is data else f"data.corpora[{i}]") for i, c in enumerate(data.corpus_list())]


def check_data_files(data: DataConfig, splits=("train", "valid")) -> None:
    """Raise ConfigError naming the key and path of the first missing data file."""
    for corpus, key in corpus_keys(data):
        if "train" in splits and corpus.train is None:
            raise ConfigError(f"{key}.train: required for training")
        for split in splits:
            for path in corpus.files(split):
                if not os.path.isfile(path):
                    raise ConfigError(f"{key}.{split}: file not found: {path}")
        for path in corpus.teacher if "train" in splits else ():
            if not os.path.isdir(path):
                raise ConfigError(f"{key}.teacher: no such checkpoint or run directory: {path}")
        if "train" in splits:
            data.clean_of(corpus).check_scorers(f"{key}.clean" if corpus.clean else "data.clean")
