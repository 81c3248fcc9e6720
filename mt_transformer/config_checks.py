"""The config's cross-field and range checks, and the data files a config names.

Each failed check raises `ConfigError` with one line that names the key. The functions take the
sections of config.py (a Config, its DataConfig, a CorpusConfig); config.py imports this module,
so this one names those classes only in words.
"""

from __future__ import annotations

import os

from mt_transformer.errors import ConfigError


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def validate(config) -> None:
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
    _check_data(d)
    _check_model(m, d)
    _check_train(t, d)
    _check_decode(dec)


def _check_data(d) -> None:
    _check(d.vocab_size >= 16, f"data.vocab_size: must be at least 16, got {d.vocab_size}")
    _check(
        0 <= d.character_coverage <= 1,
        f"data.character_coverage: must be in (0, 1], or 0 to choose from the text, got {d.character_coverage}",
    )
    _check(d.max_ratio >= 1, f"data.max_ratio: must be at least 1, got {d.max_ratio}")
    _check(0 <= d.spm_alpha < 1, f"data.spm_alpha: must be in [0, 1), got {d.spm_alpha}")
    check_corpora(d)


def _check_model(m, d) -> None:
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


def _check_train(t, d) -> None:
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


def _check_decode(dec) -> None:
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


def check_corpora(d) -> None:
    """Each corpus's languages, tag and hub name; with data.corpora, no splits of the section's own."""
    _check(d.sampling_temperature > 0, f"data.sampling_temperature: must be positive, got {d.sampling_temperature}")
    for c, key in corpus_keys(d):
        _check(c.src_lang != c.tgt_lang, f"{key}.tgt_lang: must differ from {key}.src_lang ({c.src_lang!r})")
        _check(c.format != "hub" or bool(c.hub_name), f"{key}.hub_name: required when {key}.format is hub")
        _check(c.tag is None or _one_word(c.tag), f"{key}.tag: must be one token without spaces, got {c.tag!r}")
        _check(
            not d.target_tags or _one_word(c.tgt_lang),
            f"{key}.tgt_lang: {c.tgt_lang!r} cannot name a target tag <2xx>: it must be one word",
        )
    if d.corpora:
        for key in ("train", "valid", "test", "hub_name", "tag"):
            _check(getattr(d, key) is None, f"data.{key}: with data.corpora, set it in each corpus instead")


def _one_word(text: str) -> bool:
    return text != "" and not any(ch.isspace() for ch in text)


def corpus_keys(d) -> list[tuple]:
    """Each of d.corpus_list() with the config key that names it in messages: data, or data.corpora[i]."""
    return [(c, "data" if c is d else f"data.corpora[{i}]") for i, c in enumerate(d.corpus_list())]


def check_data_files(data, splits=("train", "valid")) -> None:
    """Raise ConfigError naming the key and path of the first missing data file."""
    for corpus, key in corpus_keys(data):
        if "train" in splits and corpus.train is None:
            raise ConfigError(f"{key}.train: required for training")
        for split in splits:
            for path in corpus.files(split):
                if not os.path.isfile(path):
                    raise ConfigError(f"{key}.{split}: file not found: {path}")
