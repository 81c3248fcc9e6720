"""One model for several corpora and target languages: data.corpora, data.target_tags,
data.sampling_temperature and mt-translate --tgt-lang."""

import pytest
import torch

from conftest import run_cli, tiny_config, write_config
from mt_transformer.cli.translate import translate_main
from mt_transformer.config import load_config
from mt_transformer.decoding.engines import open_translator
from mt_transformer.errors import UserError


@pytest.fixture(scope="module")
def two_way_run(corpus, tmp_path_factory):
    """en->de on the whole corpus and de->en on its first 500 pairs, in one model with target
    tags; the de->en corpus is sampled up (temperature 3)."""
    directory = tmp_path_factory.mktemp("two_way")
    for side in ("en", "de"):
        lines = open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[:500]
        (directory / f"small.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpora = [
        {"src_lang": "en", "tgt_lang": "de", "train": f"{corpus}/train", "valid": f"{corpus}/valid"},
        {"src_lang": "de", "tgt_lang": "en", "train": str(directory / "small"), "valid": f"{corpus}/valid"},
    ]
    data = {"train": None, "valid": None, "corpora": corpora, "target_tags": True, "sampling_temperature": 3.0}
    config = tiny_config(corpus, str(directory / "run"), data=data, train={"max_steps": 20, "valid_every": 20})
    path = write_config(directory / "config.yaml", config)
    result = run_cli("mt-train", "--config", path)
    assert result.returncode == 0, result.stderr
    return str(directory / "run"), result.stderr


def test_each_corpus_is_tagged_and_sampled_by_temperature(two_way_run):
    run, logged = two_way_run
    share = 0.2 ** (1 / 3) / (0.8 ** (1 / 3) + 0.2 ** (1 / 3))  # 500 of 2,500 pairs at temperature 3
    assert f"each epoch: en->de {1 - share:.1%}, de->en {share:.1%} (data.sampling_temperature 3)" in logged
    assert "data.corpora[1] train: 500 pairs" in logged
    translator = open_translator(run, "torch", "cpu", tgt_lang="en")
    tags = translator.tokenizer.tags
    assert set(tags) == {"<2de>", "<2en>"}
    from mt_transformer.data.prepare import prepare_data

    _, encoded, sizes = prepare_data(load_config(f"{run}/config.yaml").data, run, seed=1)  # from the cache
    assert sizes == [2000, 500]
    first_ids = [row[0] for row in encoded["train"]["src_ids"]]
    assert first_ids[:2000] == [tags["<2de>"]] * 2000 and first_ids[2000:] == [tags["<2en>"]] * 500
    assert len(encoded["valid"]) == 120  # both valid sets, each with its own tag


def test_translate_asks_for_the_target_language(two_way_run, tmp_path, capsys):
    run, _ = two_way_run
    for tgt_lang in ("de", "en"):
        translator = open_translator(run, "torch", "cpu", tgt_lang=tgt_lang)
        tag = translator.tokenizer.tags[f"<2{tgt_lang}>"]
        assert translator.leads == ([tag], []) and translator.target_language == tgt_lang
        # the tag as the source's head gives exactly the ids of the tagged text
        assert translator.source_ids(["the red house", ""]) == [
            *translator.tokenizer.encode_src([f"<2{tgt_lang}> the red house"]),
            [],
        ]
        [[translation]] = translator(["the red house"])
        assert translation.text is not None
    with pytest.raises(UserError, match=r"^--tgt-lang: required: this model translates into de, en$"):
        open_translator(run, "torch", "cpu")
    with pytest.raises(UserError, match=r"^--tgt-lang: 'fr' is not among the model's target languages \(de, en\)$"):
        open_translator(run, "torch", "cpu", tgt_lang="fr")
    source = tmp_path / "in.txt"
    source.write_text("the red house\n\n", encoding="utf-8")
    with pytest.raises(SystemExit) as done:
        translate_main(["--checkpoint", run, "--tgt-lang", "de", "-i", str(source), "--device", "cpu"])
    assert done.value.code == 0
    assert capsys.readouterr().out.split("\n")[1] == ""  # an empty line stays empty, tag or not
    with pytest.raises(SystemExit) as done:
        translate_main(["--checkpoint", run, "-i", str(source), "--device", "cpu"])
    assert done.value.code == 2
    assert capsys.readouterr().err.strip().endswith("error: --tgt-lang: required: this model translates into de, en")


def test_alignments_of_a_tagged_model_attend_over_the_tagged_source_it_translated(two_way_run):
    from mt_transformer.decoding.alignment import cross_attention

    run, _ = two_way_run
    translator = open_translator(run, "torch", "cpu", tgt_lang="de", beam_size=1)
    [[best]] = translator(["the red house"])
    src_ids = translator.source_ids(["the red house"])[0]  # the tag first
    assert src_ids[0] == translator.leads[0][0]
    (weights,) = cross_attention(translator.model, src_ids, [best.tokens], translator.device)
    (seen,) = translator.cross_attention(src_ids, [best.tokens])
    assert seen.shape == (len(best.tokens) + 1, len(src_ids) + 1)  # the EOS row and column added
    assert torch.allclose(seen, weights[-1].mean(0))
    aligned = run_cli("mt-translate", "--checkpoint", run, "--tgt-lang", "de", "--alignment", "--engine", "torch",
                      input="the red house\n")  # fmt: skip
    pairs = aligned.stdout.split("\t")[1].split()
    assert aligned.returncode == 0 and all(int(p.split("-")[0]) < 3 for p in pairs)  # the tag is no source word


def test_a_model_without_target_tags_ignores_the_flag(trained_run):
    translator = open_translator(trained_run, "torch", "cpu", tgt_lang="de")
    assert translator.leads == ([], []) and translator.target_language == "de"


def test_ctranslate2_exports_translate_into_the_language_asked_for(two_way_run, tmp_path):
    from mt_transformer import checkpoint
    from mt_transformer.decoding import ctranslate2_export

    run, _ = two_way_run
    out = str(tmp_path / "ct2")
    ctranslate2_export.export(checkpoint.load(run, torch.device("cpu")), out)
    translator = open_translator(out, "ctranslate2", "cpu", tgt_lang="de", beam_size=1)
    seen = []
    search = translator.search
    translator.search = lambda sources, *rest: seen.extend(sources) or search(sources, *rest)
    [[translation]] = translator(["the red house"])
    assert seen[0][0] == translator.tokenizer.tags["<2de>"] and translation.text is not None
    with pytest.raises(UserError, match=r"^--tgt-lang: required"):
        open_translator(out, "ctranslate2", "cpu")


def test_validation_scores_each_target_language_and_averages_them(two_way_run, corpus):
    import json

    from mt_transformer.evaluation.scores import score

    run, logged = two_way_run
    with open(f"{run}/metrics.jsonl", encoding="utf-8") as f:
        last = [row for row in map(json.loads, f) if "valid_bleu" in row][-1]
    assert last["valid_bleu"] == pytest.approx((last["valid_bleu_de"] + last["valid_bleu_en"]) / 2)
    assert f"de {last['valid_bleu_de']:.2f}  en {last['valid_bleu_en']:.2f}" in logged
    # valid_bleu_de: greedy translations of the first 20 valid pairs of en->de (train.valid_max_sentences)
    sources = open(f"{corpus}/valid.en", encoding="utf-8").read().splitlines()[:20]
    references = open(f"{corpus}/valid.de", encoding="utf-8").read().splitlines()[:20]
    translate = open_translator(run, "torch", "cpu", tgt_lang="de", beam_size=1)
    hypotheses = [results[0].text for results in translate(sources)]
    assert score(hypotheses, references, metrics=("bleu",), tgt_lang="de")["bleu"] == last["valid_bleu_de"]


def test_constraints_hold_in_the_target_language_asked_for(two_way_run):
    run, _ = two_way_run
    lines = ["the red house", "Tom sold a blue bottle"]
    for language, phrases in (("de", [["Haus"], ["Flasche", "Tom"]]), ("en", [["house"], ["bottle"]])):
        translate = open_translator(run, "torch", "cpu", tgt_lang=language, beam_size=3)
        for words, result in zip(phrases, translate(lines, constraints=(phrases, [[], []]))):
            assert all(w in result[0].text for w in words)
