"""The run configuration: four typed sections read from YAML once and validated here.

This is the only module that reads YAML or holds defaults. Everything deeper takes plain
arguments. A user mistake (unknown key, wrong type, impossible value, missing file) raises
`ConfigError` with a one-line message that names the key or path; the CLI turns it into
exit code 2.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from typing import Literal

import yaml

from mt_transformer.errors import UserError


class ConfigError(UserError):
    pass


@dataclass(frozen=True)
class DataConfig:
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    # Where the pairs come from. text: `train` is a prefix, read as `{train}.{src_lang}` and
    # `{train}.{tgt_lang}`; tsv/jsonl: `train` is a file; hub: `train` is a split name of
    # the `datasets` dataset `hub_name` (config `hub_config`).
    format: Literal["text", "tsv", "jsonl", "hub"] = "text"
    train: str | None = None
    valid: str | None = None
    test: str | None = None
    hub_name: str | None = None
    hub_config: str | None = None
    # Column names for jsonl/hub rows that are not {"translation": {src_lang: .., tgt_lang: ..}}.
    src_column: str | None = None
    tgt_column: str | None = None
    # sentencepiece
    vocab_size: int = 8000
    joint_vocab: bool = True
    spm_type: Literal["unigram", "bpe"] = "unigram"
    character_coverage: float = 0.0  # 0: 0.9995 for Chinese/Japanese/Korean text, else 1.0 (tokenizer.auto_coverage)
    spm_max_sentences: int = 2_000_000
    # cleaning (training data only), in subword tokens
    max_len: int = 256
    max_ratio: float = 3.0
    # subword regularization of the training data (0: off): a segmentation drawn per batch, with
    # smoothing alpha for unigram models or as the BPE-dropout probability; never at validation
    spm_alpha: float = 0.0
    num_proc: int = 1
    cache_dir: str | None = None  # default: {train.output_dir}/cache


@dataclass(frozen=True)
class ModelConfig:
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    norm: Literal["post", "pre"] = "post"
    positions: Literal["sinusoidal", "learned"] = "sinusoidal"
    max_positions: int = 1024
    tie_embeddings: bool = True


@dataclass(frozen=True)
class TrainConfig:
    output_dir: str = "runs/default"
    max_tokens: int = 4096
    accumulate: int = 1
    max_steps: int = 100_000
    max_epochs: int = 0  # 0: no limit
    max_minutes: float = 0.0  # 0: no limit
    lr_scale: float = 1.0
    warmup: int = 4000
    label_smoothing: float = 0.1
    adam_betas: tuple[float, float] = (0.9, 0.98)
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    clip_norm: float = 0.0  # 0: no clipping
    max_bad_updates: int = 20  # stop after this many non-finite updates in a row; 0: never
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "auto"  # auto: training/precision.py
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
    tensorboard: bool = False  # also log to {output_dir}/tensorboard (needs the tensorboard package)
    init_from: str | None = None  # fine-tune: start from this run or checkpoint's weights and tokenizer
    init_from_reset: bool = True  # with init_from: a fresh optimizer; false keeps the parent's optimizer state


@dataclass(frozen=True)
class DecodeConfig:
    beam_size: int = 4
    alpha: float = 0.6
    max_len_a: float = 1.0
    max_len_b: int = 50
    n_best: int = 1
    max_tokens: int = 8192
    max_input_len: int = 0  # longer inputs are translated in parts; 0: data.max_len
    no_repeat_ngram: int = 0  # no n-gram of this many tokens twice in an output (fairseq's); 0: off
    # sampling instead of search (decoding/sampling.py): n_best draws per input
    sampling: bool = False
    topk: int = 0  # draw among the k most probable tokens; 0: all
    topp: float = 1.0  # draw among the fewest most probable tokens that hold this probability (nucleus)
    temperature: float = 1.0  # below 1 sharpens the distribution, above 1 flattens it
    seed: int = 1  # the same seed, input and batch settings draw the same samples


@dataclass(frozen=True)
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SECTIONS = {"data": DataConfig, "model": ModelConfig, "train": TrainConfig, "decode": DecodeConfig}


def _coerce(value, annotation, key: str):
    """Convert a YAML value to the field's annotated type, or raise ConfigError naming `key`."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # X | None
        if value is None:
            return None
        inner = [a for a in args if a is not type(None)][0]
        return _coerce(value, inner, key)
    if origin is Literal:
        if value not in args:
            choices = " | ".join(str(a) for a in args)
            raise ConfigError(f"{key}: {value!r} is not one of {choices}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{key}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if annotation is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if annotation is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return str(value)
    raise TypeError(f"unsupported annotation {annotation} for {key}")


def _build_section(name: str, cls, values) -> object:
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{name}: expected a mapping of keys, got {values!r}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in values:
        if key not in known:
            raise ConfigError(f"{name}.{key}: unknown key (valid keys: {', '.join(sorted(known))})")
    kwargs = {key: _coerce(v, hints[key], f"{name}.{key}") for key, v in values.items()}
    return cls(**kwargs)


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Apply `section.key=value` overrides; each value is parsed as YAML (`5e-4`, `true`, `[1, 2]`)."""
    for item in overrides:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"--set {item}: expected section.key=value")
        path, text = item.split("=", 1)
        section, key = path.split(".", 1)
        if section not in SECTIONS:
            raise ConfigError(f"{section}: unknown section in --set {path} (valid: {', '.join(SECTIONS)})")
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        if value is None and text.strip() not in ("null", "~", ""):
            value = text
        if not isinstance(raw.get(section), dict):
            raw[section] = {}
        raw[section][key] = value
    return raw


def config_from_dict(raw: dict) -> Config:
    if not isinstance(raw, dict):
        raise ConfigError("config: expected a mapping with sections data, model, train, decode")
    for name in raw:
        if name not in SECTIONS:
            raise ConfigError(f"{name}: unknown section (valid: {', '.join(SECTIONS)})")
    sections = {name: _build_section(name, cls, raw.get(name)) for name, cls in SECTIONS.items()}
    config = Config(**sections)
    validate(config)
    return config


def load_config(path: str, overrides: list[str] = ()) -> Config:
    """Read a YAML config, apply `--set` overrides and validate. Raises ConfigError."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: config file not found")
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections data, model, train, decode")
    return config_from_dict(apply_overrides(raw, list(overrides)))


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def validate(config: Config) -> None:
    """Cross-field and range checks; file existence is checked by `check_data_files`."""
    d, m, t, dec = config.data, config.model, config.train, config.decode
    for section, names in (
        ("data", ["vocab_size", "max_len", "num_proc", "spm_max_sentences"]),
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
        value = getattr(t, name)
        _check(value >= 0, f"train.{name}: must be zero or positive, got {value}")
    _check(d.vocab_size >= 16, f"data.vocab_size: must be at least 16, got {d.vocab_size}")
    _check(
        0 <= d.character_coverage <= 1,
        f"data.character_coverage: must be in (0, 1], or 0 to choose from the text, got {d.character_coverage}",
    )
    _check(d.max_ratio >= 1, f"data.max_ratio: must be at least 1, got {d.max_ratio}")
    _check(0 <= d.spm_alpha < 1, f"data.spm_alpha: must be in [0, 1), got {d.spm_alpha}")
    _check(d.src_lang != d.tgt_lang, f"data.tgt_lang: must differ from data.src_lang ({d.src_lang!r})")
    _check(m.d_model % m.n_heads == 0, f"model.d_model: {m.d_model} is not divisible by model.n_heads ({m.n_heads})")
    _check(
        m.positions != "sinusoidal" or m.d_model % 2 == 0,
        f"model.d_model: must be even for sinusoidal positions, got {m.d_model}",
    )
    _check(0 <= m.dropout < 1, f"model.dropout: must be in [0, 1), got {m.dropout}")
    _check(0 <= m.attention_dropout < 1, f"model.attention_dropout: must be in [0, 1), got {m.attention_dropout}")
    _check(
        m.max_positions > d.max_len,
        f"model.max_positions: must exceed data.max_len ({d.max_len}), got {m.max_positions}",
    )
    _check(
        t.max_tokens >= d.max_len + 1,
        f"train.max_tokens: must be at least data.max_len + 1 ({d.max_len + 1}), got {t.max_tokens}",
    )
    _check(t.lr_scale > 0, f"train.lr_scale: must be positive, got {t.lr_scale}")
    _check(0 <= t.label_smoothing < 1, f"train.label_smoothing: must be in [0, 1), got {t.label_smoothing}")
    _check(all(0 <= b < 1 for b in t.adam_betas), f"train.adam_betas: each must be in [0, 1), got {list(t.adam_betas)}")
    _check(t.adam_eps > 0, f"train.adam_eps: must be positive, got {t.adam_eps}")
    _check(t.clip_norm >= 0, f"train.clip_norm: must be zero or positive, got {t.clip_norm}")
    _check(
        t.device == "auto" or t.device == "cpu" or t.device.startswith("cuda"),
        f"train.device: expected auto, cpu or cuda[:N], got {t.device!r}",
    )
    _check(
        dec.sampling or dec.n_best <= dec.beam_size,
        f"decode.n_best: {dec.n_best} exceeds decode.beam_size ({dec.beam_size})",
    )
    _check(
        not (dec.sampling and dec.beam_size > 1),
        f"decode.beam_size: {dec.beam_size} with sampling, which draws one token at a time; leave it at 1",
    )
    _check(dec.topk >= 0, f"decode.topk: must be zero or positive, got {dec.topk}")
    _check(dec.no_repeat_ngram >= 0, f"decode.no_repeat_ngram: must be zero or positive, got {dec.no_repeat_ngram}")
    _check(0 < dec.topp <= 1, f"decode.topp: must be in (0, 1], got {dec.topp}")
    _check(dec.temperature > 0, f"decode.temperature: must be positive, got {dec.temperature}")
    _check(dec.alpha >= 0, f"decode.alpha: must be zero or positive, got {dec.alpha}")
    _check(dec.max_len_a >= 0 and dec.max_len_b >= 0, "decode.max_len_a: max_len_a and max_len_b must be >= 0")
    _check(dec.max_input_len >= 0, f"decode.max_input_len: must be zero or positive, got {dec.max_input_len}")
    if d.format == "hub":
        _check(bool(d.hub_name), "data.hub_name: required when data.format is hub")


def data_files(data: DataConfig, split: str) -> list[str]:
    """The local files behind one split (empty for hub data or an unset split)."""
    location = getattr(data, split)
    if location is None or data.format == "hub":
        return []
    if data.format == "text":
        return [f"{location}.{data.src_lang}", f"{location}.{data.tgt_lang}"]
    return [location]


def check_data_files(data: DataConfig, splits=("train", "valid")) -> None:
    """Raise ConfigError naming the key and path of the first missing data file."""
    if "train" in splits and data.train is None:
        raise ConfigError("data.train: required for training")
    for split in splits:
        for path in data_files(data, split):
            if not os.path.isfile(path):
                raise ConfigError(f"data.{split}: file not found: {path}")


def to_yaml(config: Config) -> str:
    raw = config.to_dict()
    raw["train"]["adam_betas"] = list(raw["train"]["adam_betas"])
    return yaml.safe_dump(raw, sort_keys=False)
