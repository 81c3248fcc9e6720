import os

import pytest

from conftest import run_cli, tiny_config, write_config
from mt_transformer.config import ConfigError, check_data_files, load_config


def test_loads_and_applies_overrides(corpus, tmp_path):
    path = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "out")))
    config = load_config(path, ["model.dropout=0.3", "train.adam_betas=[0.9, 0.99]", "data.joint_vocab=false"])
    assert config.model.dropout == 0.3
    assert config.train.adam_betas == (0.9, 0.99)
    assert config.data.joint_vocab is False
    assert config.train.lr_scale == 1.0 and isinstance(config.train.lr_scale, float)  # int coerced to float


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.colour=red", "model.colour: unknown key"),
        ("optimizer.lr=1", "optimizer: unknown section"),
        ("model.d_model=abc", "model.d_model: expected an integer"),
        ("model.d_model=100", "model.d_model: 100 is not divisible by model.n_heads (8)"),
        ("model.d_ff=0", "model.d_ff: must be positive"),
        ("model.encoder_layers=-1", "model.encoder_layers: must be positive"),
        ("train.warmup=0", "train.warmup: must be positive"),
        ("decode.beam_size=0", "decode.beam_size: must be positive"),
        ("decode.n_best=5", "decode.n_best: 5 exceeds decode.beam_size (4)"),
        ("decode.max_input_len=-1", "decode.max_input_len: must be zero or positive, got -1"),
        ("model.norm=middle", "model.norm: 'middle' is not one of post | pre"),
        ("train.precision=fp8", "train.precision: 'fp8' is not one of auto | fp32 | bf16 | fp16"),
        ("decode.precision=fp8", "decode.precision: 'fp8' is not one of auto | fp32 | bf16 | fp16"),
        ("data.joint_vocab=maybe", "data.joint_vocab: expected true or false"),
        ("model.dropout=1.5", "model.dropout: must be in [0, 1)"),
        ("model.word_dropout=1", "model.word_dropout: must be in [0, 1)"),
        ("train.adam_betas=[0.9]", "train.adam_betas: expected a list of 2 values"),
        ("nodot=1", "--set nodot=1: expected section.key=value"),
        ("data.corpora=[{src_lang: de, tgt_lang: de}]", "data.corpora[0].tgt_lang: must differ from"),
        ("data.corpora=[{src_lang: de, tgt_lang: en}, {lang: fr}]", "data.corpora[1].lang: unknown key"),
        ("data.corpora=[{src_lang: de, tgt_lang: en, tag: two words}]", "data.corpora[0].tag: must be one token"),
        ("data.corpora=5", "data.corpora: expected a list"),
        ("data.sampling_temperature=0", "data.sampling_temperature: must be positive"),
        ("data.teacher_nbest=0", "data.teacher_nbest: must be at least 1, got 0"),
        ("data.teacher_select=chrf", "data.teacher_select: chrf chooses among the teacher's n-best; set data.teacher"),
        ("data.teacher_select=bleu", "data.teacher_select: 'bleu' is not one of score | chrf"),
        ("data.teacher_min_log_prob=0.5", "data.teacher_min_log_prob: must be negative"),
        ("data.teacher=[[a]]", "data.teacher[0]: expected a string"),
    ],
)
def test_bad_values_name_the_key(override, message):
    with pytest.raises(ConfigError) as error:
        load_config("configs/base.yaml", [override])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["train.decay=rsqrt", "train.warmup_fraction=0"], "train.warmup_fraction: decay rsqrt falls from the end"),
        (["train.decay=constant", "train.cooldown_fraction=0.95"], "train.cooldown_fraction: must be in (0, 1 - warm"),
        (["train.decay=rsqrt", "train.cooldown_fraction=0"], "train.cooldown_fraction: must be in (0, 1 - warmup"),
        (["train.decay=cosine"], "train.decay: 'cosine' is not one of linear | rsqrt | constant"),
        (["train.dropout_min_epochs=-1"], "train.dropout_min_epochs: must be at least 0, got -1"),
        (
            ["train.long_run_dropout=[10, 1.5]"],
            "train.long_run_dropout: expected [epochs >= 0, a rate in [0, 1)], got [10.0, 1.5]",
        ),
        (["train.long_run_dropout=0.2"], "train.long_run_dropout: expected a list of 2 values, got 0.2"),
        (["train.long_run_word_dropout=-0.1"], "train.long_run_word_dropout: must be in [0, 1), got -0.1"),
        (["train.dropout_from=1"], "train.dropout_from: must be in [0, 1), got 1.0"),
    ],
)
def test_bad_budget_decays_name_the_key(overrides, message):
    with pytest.raises(ConfigError) as error:
        load_config("configs/recipes/small_cpu.yaml", overrides)
    assert message in str(error.value)


def test_corpora_replace_the_sections_own_splits(corpus, tmp_path):
    corpora = [
        {"src_lang": "en", "tgt_lang": "de", "train": f"{corpus}/train"},
        {"src_lang": "de", "tgt_lang": "en", "train": f"{corpus}/train", "tag": "<bt>"},
    ]
    config = tiny_config(corpus, str(tmp_path / "run"), data={"corpora": corpora, "target_tags": True})
    with pytest.raises(ConfigError, match=r"^data.train: with data.corpora, set it in each corpus instead$"):
        load_config(write_config(tmp_path / "c.yaml", config))
    config["data"].update(train=None, valid=None)
    data = load_config(write_config(tmp_path / "c.yaml", config)).data
    assert [(c.src_lang, c.tgt_lang, c.tag) for c in data.corpus_list()] == [("en", "de", None), ("de", "en", "<bt>")]
    assert data.tags == ["<2de>", "<2en>", "<bt>"] and data.target_languages == ["de", "en"]
    assert data.corpora[1].source_tags(True) == ["<2en>", "<bt>"]
    config["data"]["corpora"][1]["train"] = str(tmp_path / "missing")
    with pytest.raises(ConfigError, match=r"data.corpora\[1\].train: file not found: .*missing.de"):
        check_data_files(load_config(write_config(tmp_path / "c.yaml", config)).data)


def test_a_teacher_is_one_path_or_a_list_and_must_exist(corpus, tmp_path):
    assert load_config("configs/base.yaml", [f"data.teacher={corpus}"]).data.teacher == (corpus,)
    both = load_config("configs/base.yaml", [f"data.teacher=[{corpus}, {tmp_path}]"]).data
    assert both.teacher == (corpus, str(tmp_path))
    config = tiny_config(corpus, str(tmp_path / "run"), data={"teacher": [str(tmp_path / "gone")]})
    with pytest.raises(ConfigError, match=r"^data.teacher: no such checkpoint or run directory: .*gone$"):
        check_data_files(load_config(write_config(tmp_path / "c.yaml", config)).data)
    config["data"].update(train=None, valid=None, corpora=[{"src_lang": "en", "tgt_lang": "de", "train": "x"}])
    with pytest.raises(ConfigError, match=r"^data.teacher: with data.corpora, set it in each corpus instead$"):
        load_config(write_config(tmp_path / "c.yaml", config))


def test_unknown_key_in_file(tmp_path):
    path = write_config(tmp_path / "c.yaml", {"model": {"d_modle": 512}})
    with pytest.raises(ConfigError, match=r"model.d_modle: unknown key \(valid keys: .*d_model"):
        load_config(path)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="nope.yaml: config file not found"):
        load_config("nope.yaml")


def test_a_config_that_is_no_yaml_text_is_one_line(tmp_path):
    (tmp_path / "binary.yaml").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "deep.yaml").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match=r"binary\.yaml: not UTF-8 text \(byte \d+\)"):
        load_config(str(tmp_path / "binary.yaml"))
    with pytest.raises(ConfigError, match=r"deep\.yaml: (nested deeper than a config can be|not valid YAML)"):
        load_config(str(tmp_path / "deep.yaml"))
    (tmp_path / "c.yaml").write_text("data: {src_lang: en}\n")
    # a --set value past the stack, through the same guard: deeper adds only time (pyyaml's scanner
    # is quadratic in the depth it reaches before the stack ends; the file above goes that far)
    deep = "[" * 600 + "]" * 600
    with pytest.raises(ConfigError, match=r"^--set data\.src_lang: nested deeper than a config can be$"):
        load_config(str(tmp_path / "c.yaml"), [f"data.src_lang={deep}"])


def test_cli_errors_exit_2_and_write_nothing(corpus, tmp_path):
    out = tmp_path / "out"
    path = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(out)))
    for args in (["--set", "model.n_heads=3"], ["--set", "train.bogus=1"], ["--set", f"data.train={tmp_path}/missing"]):
        result = run_cli("mt-train", "--config", path, *args)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
        assert "Traceback" not in result.stderr
    assert "data.train: file not found" in result.stderr and f"{tmp_path}/missing.en" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize("config, paper", [("configs/base.yaml", 65e6), ("configs/big.yaml", 213e6)])
def test_dry_run_matches_paper_parameter_counts(config, paper):
    result = run_cli("mt-train", "--config", config, "--dry-run", "--set", "data.vocab_size=37000")
    assert result.returncode == 0, result.stderr
    count = int(result.stdout.strip().splitlines()[-1].removeprefix("parameters: "))
    assert abs(count - paper) / paper < 0.05, count
    assert "d_model:" in result.stdout  # the resolved config is printed too


def test_all_shipped_configs_load():
    for directory in ("configs", "configs/recipes", "configs/bench"):
        for name in os.listdir(directory):
            if name.endswith(".yaml"):
                load_config(os.path.join(directory, name))
    two_way = load_config("configs/recipes/two_way_cpu.yaml").data
    assert two_way.tags == ["<2de>", "<2en>"] and two_way.target_languages == ["de", "en"]
