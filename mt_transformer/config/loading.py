"""Reading a config: YAML once, `--set` overrides, each value converted to its field's type, then
validated. A user mistake (unknown key, wrong type, impossible value) raises `ConfigError` with
one line that names the key; the CLI turns it into exit code 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import types
import typing
from typing import Literal

import yaml

from mt_transformer.config.checks import validate
from mt_transformer.config.sections import Config, DataConfig, DecodeConfig, ModelConfig
from mt_transformer.config.training import TrainConfig
from mt_transformer.errors import ConfigError

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
    if dataclasses.is_dataclass(annotation):  # data.augment
        return _build_section(key, annotation, value)
    if origin is tuple and args[-1] is Ellipsis and dataclasses.is_dataclass(args[0]):  # data.corpora
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        return tuple(_build_section(f"{key}[{i}]", args[0], v) for i, v in enumerate(value))
    if origin is tuple and args[-1] is Ellipsis:  # a list of values; one value alone is a list of one
        values = value if isinstance(value, (list, tuple)) else [value]
        return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(values))
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
    if not values and hasattr(cls, "off"):  # data.clean: {} turns every rule off
        return cls.off()
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


@contextlib.contextmanager
def _within_depth(where: str):
    """A YAML document nested deeper than Python's stack is one line naming where it came from."""
    try:
        yield
    except RecursionError:
        raise ConfigError(f"{where}: nested deeper than a config can be") from None


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
            with _within_depth(f"--set {path}"):
                value = yaml.safe_load(text)
        except yaml.YAMLError:
            value = text
        if value is None and text.strip() not in ("null", "~", ""):
            value = text
        if not isinstance(raw.get(section), dict):
            raw[section] = {}
        *outer, last = key.split(".")  # data.augment.typos=0.05: a key of a nested mapping
        mapping = raw[section]
        for name in outer:
            if not isinstance(mapping.get(name), dict):
                mapping[name] = {}
            mapping = mapping[name]
        mapping[last] = value
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
        with open(path, encoding="utf-8") as f, _within_depth(path):
            raw = yaml.safe_load(f) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise ConfigError(f"{path}: not valid YAML{where}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{path}: not UTF-8 text (byte {error.start}); a config is a YAML text file") from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror})") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping with sections data, model, train, decode")
    return config_from_dict(apply_overrides(raw, list(overrides)))


def to_yaml(config: Config) -> str:
    raw = config.to_dict()
    raw["train"]["adam_betas"] = list(raw["train"]["adam_betas"])
    raw["data"]["corpora"] = list(raw["data"]["corpora"])
    for corpus in [raw["data"], *raw["data"]["corpora"]]:
        corpus["teacher"] = list(corpus["teacher"])
    return yaml.safe_dump(raw, sort_keys=False)


def finetune_yaml(config: Config, parent: str, output_dir: str) -> str:
    """A config that fine-tunes the checkpoint `parent` (trained with `config`) into `output_dir`:
    its model and tokenizer settings and languages, the training defaults, and data splits for
    the user to give."""
    splits = dict(format="text", train=None, valid=None, test=None, hub_name=None, hub_config=None, cache_dir=None)
    splits["teacher"] = ()
    data = dataclasses.replace(config.data, **splits)
    train = TrainConfig(output_dir=output_dir, init_from=parent)
    example = "data.train=corpus/train data.valid=corpus/valid"
    if data.corpora:
        example = "data.corpora (one entry per language pair; edit this file)"
    return (
        f"# Fine-tune {parent} on your data (text files {{prefix}}.{{src_lang}}, {{prefix}}.{{tgt_lang}}):\n"
        f"#   mt-train --config THIS_FILE --set {example}\n"
        f"# The model and tokenizer settings below must stay as they are. To train low-rank adapters\n"
        f"# alone, in a fraction of the memory, set train.lora.rank (16 is common; docs/exports.md).\n"
    ) + to_yaml(dataclasses.replace(config, data=data, train=train))
