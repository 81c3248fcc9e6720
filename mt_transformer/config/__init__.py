"""The run configuration: four typed sections (sections.py, training.py) read from YAML once (loading.py) and
validated there (checks.py). This is the only place that reads YAML or holds defaults."""

from mt_transformer.config.checks import check_data_files, corpus_keys, validate
from mt_transformer.config.cleaning import CleanConfig
from mt_transformer.config.loading import (
    SECTIONS,
    apply_overrides,
    config_from_dict,
    finetune_yaml,
    load_config,
    to_yaml,
)
from mt_transformer.config.sections import (
    AugmentConfig,
    Config,
    CorpusConfig,
    DataConfig,
    DecodeConfig,
    ModelConfig,
    language_tag,
    tag_language,
)
from mt_transformer.config.training import GuidedAlignmentConfig, LoraConfig, TrainConfig
from mt_transformer.errors import ConfigError

__all__ = [
    "SECTIONS",
    "AugmentConfig",
    "CleanConfig",
    "Config",
    "ConfigError",
    "CorpusConfig",
    "DataConfig",
    "DecodeConfig",
    "GuidedAlignmentConfig",
    "LoraConfig",
    "ModelConfig",
    "TrainConfig",
    "apply_overrides",
    "check_data_files",
    "config_from_dict",
    "finetune_yaml",
    "corpus_keys",
    "language_tag",
    "load_config",
    "tag_language",
    "to_yaml",
    "validate",
]
