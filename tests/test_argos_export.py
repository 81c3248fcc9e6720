"""exchange/argos_export.py and argos_check.py: Argos Translate packages, checked with argostranslate
from PyPI, as a user installs and runs them."""

import importlib.util
import json
import os
import zipfile

import pytest

from conftest import run_cli, tiny_config, write_config

# found, not imported: spaCy alone takes a second to import, in every worker that collects this
if importlib.util.find_spec("argostranslate") is None:
    pytest.skip("argostranslate is not installed (pip install argostranslate)", allow_module_level=True)
if importlib.util.find_spec("spacy") is None:
    pytest.skip("spaCy is not installed", allow_module_level=True)

from mt_transformer import checkpoint  # noqa: E402
from mt_transformer.exchange import argos_check  # noqa: E402

# one worker for the module (make test runs two): its trained model and package (about 20 s) made once, not on each
pytestmark = pytest.mark.xdist_group("argos_export")


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory) -> str:
    """A tiny model trained long enough to write sentences that end (the shared 40-step run writes
    one letter; under Noam's schedule 200 steps repeat a syllable to Argos's length limit of 256):
    80 updates of 2,048 tokens at a peak learning rate of 0.02."""
    directory = tmp_path_factory.mktemp("argos_run")
    schedule = {"schedule": "budget", "peak_lr": 0.02, "warmup_fraction": 0.1, "max_minutes": 0}
    steps = {"max_steps": 80, "valid_every": 80, "max_tokens": 2048}
    config = tiny_config(corpus, str(directory / "run"), train={**steps, **schedule})
    config["data"]["test"] = f"{corpus}/test"
    assert run_cli("mt-train", "--config", write_config(directory / "config.yaml", config)).returncode == 0
    return str(directory / "run")


@pytest.fixture(scope="module")
def package(trained, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("argos") / "en_de.argosmodel")
    result = run_cli("mt-export", "--checkpoint", trained, "--format", "argos", path, "--license", "MIT")
    assert result.returncode == 0, result.stderr
    assert "argostranslate" in result.stdout and "40 check lines" in result.stdout
    return path


@pytest.mark.slow  # about 15 s: the export, and argostranslate started in a process of its own
def test_a_package_is_one_directory_argos_reads(package, trained):
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
        (top,) = {name.split("/")[0] for name in names}
        meta = json.loads(archive.read(f"{top}/metadata.json"))
        spm = archive.read(f"{top}/sentencepiece.model")
    assert top == "translate-en_de-1_0"
    assert {f"{top}/model/model.bin", f"{top}/model/config.json", f"{top}/spacy/meta.json"} <= set(names)
    from importlib.metadata import version

    assert meta["from_code"] == "en" and meta["to_code"] == "de" and meta["from_name"] == "English"
    assert meta["to_name"] == "German" and meta["argos_version"] == version("argostranslate")
    assert meta["package_version"] == "1.0" and meta["license"] == "MIT" and meta["type"] == "translate"
    loaded = checkpoint.load(trained, "cpu")
    with open(loaded.tokenizer.path(loaded.tokenizer.model_files[0]), "rb") as f:
        assert spm == f.read()  # Argos feeds the model our pieces
    with zipfile.ZipFile(package) as archive:
        config = json.loads(archive.read(f"{top}/model/config.json"))
    assert config.get("add_source_eos") is True


@pytest.mark.slow
def test_argostranslate_splits_a_paragraph_offline_and_translates_as_we_do(package, trained, tmp_path):
    with zipfile.ZipFile(package) as archive:
        archive.extractall(tmp_path / "unpacked")
    (directory,) = (tmp_path / "unpacked").iterdir()
    tokenizer = checkpoint.load(trained, "cpu").tokenizer
    paragraph = "the teacher bought three red apples. my sister sold two green books."
    lines = [paragraph, "the teacher bought three red apples.", "my sister sold two green books."]
    theirs = argos_check.argos_translations(package, lines, str(tmp_path))
    ours, _ = argos_check.ours_at_argos_settings(str(directory), tokenizer, lines)
    assert theirs == ours and all(theirs)
    assert theirs[0] == f"{theirs[1]} {theirs[2]}"  # two sentences, translated apart, joined


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--check-src", "no/such.en"], "--check-src: no source lines to check the package with (no/such.en"),
        (["--quantization", "int8", "--format", "huggingface"], "--quantization: only for --format ctranslate2"),
    ],
)
def test_mistakes_are_one_line_errors_and_nothing_is_written(trained_run, tmp_path, extra, message):
    out = tmp_path / "x.argosmodel"
    result = run_cli("mt-export", "--checkpoint", trained_run, "--format", "argos", str(out), *extra)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_language_without_a_known_name_needs_one():
    from types import SimpleNamespace

    from mt_transformer.errors import UserError
    from mt_transformer.exchange import argos_export

    corpus = SimpleNamespace(src_lang="qx", tgt_lang="en")
    with pytest.raises(UserError, match="--from-name: no name known for the language code 'qx'"):
        argos_export.metadata(corpus, None, None, "1.0", "MIT")
    assert argos_export.metadata(corpus, "Qxish", None, "1.0", "MIT")["from_name"] == "Qxish"


def test_what_a_package_cannot_carry_is_named(corpus, tmp_path):
    config = tiny_config(corpus, str(tmp_path / "run"), train={"max_steps": 2, "valid_every": 2})
    config["data"]["joint_vocab"] = False
    path = write_config(tmp_path / "config.yaml", config)
    assert run_cli("mt-train", "--config", path).returncode == 0
    result = run_cli("mt-export", "--checkpoint", str(tmp_path / "run"), "--format", "argos", str(tmp_path / "x"))
    assert result.returncode == 2 and "one sentencepiece model for both languages" in result.stderr
    assert not os.path.exists(tmp_path / "x")


@pytest.mark.slow  # about 15 s: a short training run, the export and its argostranslate check
def test_a_folded_source_is_a_package_whose_sentencepiece_model_folds(corpus, tmp_path):
    import sentencepiece as spm

    config = tiny_config(corpus, str(tmp_path / "run"), train={"max_steps": 10, "valid_every": 10})
    config["data"]["fold_source_case"] = True
    assert run_cli("mt-train", "--config", write_config(tmp_path / "config.yaml", config)).returncode == 0
    path, few = str(tmp_path / "folded.argosmodel"), tmp_path / "few.en"
    few.write_text("".join(open(f"{corpus}/test.en", encoding="utf-8").readlines()[:4]), encoding="utf-8")
    # 4 check lines: a model of 10 updates writes each to Argos's length limit, slowly
    args = ["--checkpoint", str(tmp_path / "run"), "--format", "argos", path, "--check-src", str(few)]
    result = run_cli("mt-export", *args)
    assert result.returncode == 0, result.stderr
    with zipfile.ZipFile(path) as archive:
        proto = archive.read("translate-en_de-1_0/sentencepiece.model")
    pieces = spm.SentencePieceProcessor(model_proto=proto)
    usual = pieces.encode("the red house")
    assert pieces.encode("THE RED HOUSE") == usual and pieces.encode("The Red House") == usual
    assert usual == checkpoint.load(str(tmp_path / "run"), "cpu").tokenizer.encode_src(["the red house"])[0]


@pytest.mark.apps  # about 30 s: a two-way model, two packages, argostranslate twice (make test-apps)
def test_a_model_with_target_tags_is_a_package_per_pair_whose_model_adds_its_tag(corpus, tmp_path):
    corpora = [
        {"src_lang": lang, "tgt_lang": other, "train": f"{corpus}/train", "test": f"{corpus}/test"}
        for lang, other in (("en", "de"), ("de", "en"))
    ]
    data = {"train": None, "valid": None, "corpora": corpora, "target_tags": True}
    config = tiny_config(corpus, str(tmp_path / "run"), data=data, train={"max_steps": 150, "valid_every": 150})
    config["decode"]["max_len_b"] = 200  # CTranslate2 below stops at its own limit
    assert run_cli("mt-train", "--config", write_config(tmp_path / "config.yaml", config)).returncode == 0
    out = tmp_path / "two_way.argosmodel"
    args = ["--checkpoint", str(tmp_path / "run"), "--format", "argos", str(out), "--quantization", "float32"]
    result = run_cli("mt-export", *args, "--check-src", f"{corpus}/test.en")
    assert result.returncode == 2 and "--check-src" in result.stderr  # one file cannot be both sources
    result = run_cli("mt-export", *args)
    assert result.returncode == 0, result.stderr
    for src, tgt in (("en", "de"), ("de", "en")):
        package = tmp_path / f"two_way.{src}_{tgt}.argosmodel"
        with zipfile.ZipFile(package) as archive:
            meta = json.loads(archive.read(f"translate-{src}_{tgt}-1_0/metadata.json"))
            archive.extractall(tmp_path / f"{src}_{tgt}")
        assert (meta["from_code"], meta["to_code"]) == (src, tgt) and "target_prefix" not in meta
        assert (tmp_path / f"{src}_{tgt}" / f"translate-{src}_{tgt}-1_0" / "model" / "model.bin").is_file()
