"""The recipes in configs/recipes/ load and train for a language pair other than their default,
including one whose target script has no spaces (as Chinese and Japanese do)."""

import json
import os

import pytest

from conftest import ROOT, run_cli

RECIPES = ["configs/recipes/small_cpu.yaml", "configs/recipes/base_gpu.yaml"]
HAN = [chr(0x4E00 + 37 * i) for i in range(400)]


@pytest.fixture(scope="module")
def no_space_corpus(corpus, tmp_path_factory) -> str:
    """The generated English-German corpus with each German word written as one or two Han
    characters and no spaces: English -> "zh", a pair whose target script has no word breaks."""
    directory = tmp_path_factory.mktemp("en_zh")
    codes: dict[str, str] = {}
    for split in ("train", "valid", "test"):
        with open(f"{corpus}/{split}.de", encoding="utf-8") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            for word in line.split():
                n = len(codes)
                codes.setdefault(
                    word, HAN[n % len(HAN)] + (HAN[(n // len(HAN)) * 7 % len(HAN)] if n >= len(HAN) else "")
                )
            out.append("".join(codes[w] for w in line.split()))
        (directory / f"{split}.zh").write_text("\n".join(out) + "\n", encoding="utf-8")
        with open(f"{corpus}/{split}.en", encoding="utf-8") as f:
            (directory / f"{split}.en").write_text(f.read(), encoding="utf-8")
    return str(directory)


def overrides(corpus: str, run: str, tgt_lang: str = "zh") -> list[str]:
    return [
        "data.src_lang=en",
        f"data.tgt_lang={tgt_lang}",
        f"data.train={corpus}/train",
        f"data.valid={corpus}/valid",
        f"data.test={corpus}/test",
        f"train.output_dir={run}",
    ]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipes_take_another_pair(recipe, no_space_corpus, tmp_path):
    result = run_cli(
        "mt-train",
        "--config",
        os.path.join(ROOT, recipe),
        "--dry-run",
        "--set",
        *overrides(no_space_corpus, str(tmp_path / "run")),
    )
    assert result.returncode == 0, result.stderr
    assert "tgt_lang: zh" in result.stdout and "character_coverage: 0.0" in result.stdout
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.slow
def test_small_cpu_trains_on_a_pair_without_spaces(no_space_corpus, tmp_path):
    """The small_cpu recipe, unchanged but for the pair, a vocabulary this tiny corpus can fill and
    a few updates: the tokenizer picks the rich-script coverage, translation and scoring work."""
    run = str(tmp_path / "run")
    train = run_cli(
        "mt-train",
        "--config",
        os.path.join(ROOT, RECIPES[0]),
        "--set",
        *overrides(no_space_corpus, run),
        "data.vocab_size=400",
        "train.max_steps=3",
        "train.valid_every=3",
        "train.valid_max_sentences=10",
        "train.max_tokens=1500",
    )
    assert train.returncode == 0, train.stderr
    assert "character coverage 0.9995" in train.stderr + train.stdout
    for lang in ("en", "zh"):  # 8 test lines: an untrained model writes to the length limit
        with open(f"{no_space_corpus}/test.{lang}", encoding="utf-8") as f:
            (tmp_path / f"test.{lang}").write_text("".join(f.readlines()[:8]), encoding="utf-8")
    scored = run_cli(
        "mt-eval", "--checkpoint", run, "--src", str(tmp_path / "test.en"), "--ref", str(tmp_path / "test.zh"), "--json"
    )
    assert scored.returncode == 0, scored.stderr
    assert "tok:zh" in json.loads(scored.stdout)["signature"]["bleu"]
