"""Export to CTranslate2 and translation with it: the same numbers and the same greedy outputs as PyTorch."""

import dataclasses
import json
import os

import pytest
import torch

from conftest import perturbed_model, run_cli, token_log_probs, translator
from mt_transformer import checkpoint
from mt_transformer.errors import UserError
from mt_transformer.model.transformer import Transformer

ctranslate2 = pytest.importorskip("ctranslate2")
from mt_transformer.decoding import ctranslate2_engine, ctranslate2_export  # noqa: E402

CPU = torch.device("cpu")


def ct2_token_log_probs(translator, tokenizer, src_ids: list[int], tgt_ids: list[int]) -> torch.Tensor:
    result = translator.score_batch([tokenizer.src_pieces(src_ids)], [tokenizer.tgt_pieces(tgt_ids)])[0]
    return torch.tensor(result.log_probs)


@pytest.mark.parametrize(
    "norm,positions,activation",
    [
        ("post", "sinusoidal", "relu"),
        ("pre", "learned", "swish"),
        ("post", "sinusoidal", "gelu"),
        ("pre", "fairseq", "relu"),
    ],
)
def test_exported_model_scores_like_ours(trained_run, corpus, tmp_path, norm, positions, activation):
    """Per-token log-probabilities agree to 1e-4: every weight, norm and position went to the right place."""
    loaded = checkpoint.load(trained_run, CPU)
    tokenizer, config = loaded.tokenizer, loaded.config
    layout = dict(norm=norm, positions=positions, activation=activation, output_bias=activation == "swish")
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, **layout))
    model = perturbed_model(config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    out = tmp_path / "ct2"
    ctranslate2_export.export(dataclasses.replace(loaded, model=model, config=config), str(out))
    translator, _, _ = ctranslate2_engine.load(str(out), torch.device("cpu"))
    settings = ctranslate2_engine.read_settings(str(out))
    assert settings["config"]["model"]["norm"] == norm

    lines = open(f"{corpus}/valid.en", encoding="utf-8").read().splitlines()[:5]
    refs = open(f"{corpus}/valid.de", encoding="utf-8").read().splitlines()[:5]
    for src_ids, tgt_ids in zip(tokenizer.encode_src(lines), tokenizer.tgt.encode(refs)):
        ours = token_log_probs(model, src_ids, tgt_ids)
        theirs = ct2_token_log_probs(translator, tokenizer, src_ids, tgt_ids)
        assert theirs.shape == ours.shape
        assert torch.allclose(theirs, ours, atol=1e-4), (theirs - ours).abs().max()


def test_a_source_prefix_is_a_piece_the_model_adds_itself(trained_run, corpus, tmp_path):
    """source_prefix (for Argos, which cannot prefix a source): the model reads the tag before every
    source it is given, and scores as ours does after that tag, not after another."""
    from mt_transformer.data.sentencepiece_training import train_tokenizer

    lines = open(f"{corpus}/valid.en", encoding="utf-8").read().splitlines()[:5]
    refs = open(f"{corpus}/valid.de", encoding="utf-8").read().splitlines()[:5]
    src, tgt = (open(f"{corpus}/train.{s}", encoding="utf-8").read().splitlines()[:500] for s in ("en", "de"))
    tags = ["<2de>", "<2en>"]
    tokenizer = train_tokenizer(str(tmp_path / "tok"), src, tgt, True, 150, "bpe", 1.0, 10_000, 1, False, tags)
    loaded = checkpoint.load(trained_run, CPU)
    model = perturbed_model(loaded.config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    out = tmp_path / "ct2-de"
    tagged = dataclasses.replace(loaded, model=model, tokenizer=tokenizer)
    gap = ctranslate2_export.export(tagged, str(out), source_prefix="<2de>")
    assert gap < 1e-4 and not (out / "mt_transformer.json").exists()
    translator = ctranslate2.Translator(str(out), device="cpu", compute_type="float32")
    for src_ids, tgt_ids in zip(tokenizer.encode_src(lines), tokenizer.tgt.encode(refs)):
        theirs = ct2_token_log_probs(translator, tokenizer, src_ids, tgt_ids)
        ours = token_log_probs(model, [tokenizer.tags["<2de>"], *src_ids], tgt_ids)
        assert torch.allclose(theirs, ours, atol=1e-4), (theirs - ours).abs().max()
        other = token_log_probs(model, [tokenizer.tags["<2en>"], *src_ids], tgt_ids)
        assert (theirs - other).abs().max() > 1e-3


def test_mt_export_and_translate_with_ctranslate2(trained_run, corpus, tmp_path):
    out = tmp_path / "exported"
    result = run_cli("mt-export", "--checkpoint", trained_run, "--format", "ctranslate2", str(out))
    assert result.returncode == 0, result.stderr
    assert {"model.bin", "spm.model", checkpoint.EXPORT_SETTINGS_FILE} <= set(os.listdir(out))
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]  # no temporary directory left

    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:20] + [""]
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    ct2 = run_cli("mt-translate", "--engine", "ctranslate2", "--checkpoint", str(out), "-i", str(source), "--beam", "1")
    assert ct2.returncode == 0, ct2.stderr
    ours = [r[0].text for r in translator(trained_run, beam_size=1, max_len_b=10)(lines)]
    assert ct2.stdout.splitlines() == ours  # greedy: the same outputs, the empty line stays empty

    beam = run_cli(
        "mt-translate",
        "--engine",
        "ctranslate2",
        "--checkpoint",
        str(out),
        "-i",
        str(source),
        "--beam",
        "2",
        "--nbest",
        "2",
    )
    assert beam.returncode == 0, beam.stderr
    rows = [line.split("\t") for line in beam.stdout.splitlines()]
    assert sorted({int(r[0]) for r in rows}) == list(range(len(lines)))

    int8 = tmp_path / "int8"
    assert (
        run_cli(
            "mt-export", "--checkpoint", trained_run, "--format", "ctranslate2", "--quantization", "int8", str(int8)
        ).returncode
        == 0
    )
    assert json.loads((int8 / checkpoint.EXPORT_SETTINGS_FILE).read_text())["quantization"] == "int8"
    assert os.path.getsize(int8 / "model.bin") < os.path.getsize(out / "model.bin")


def test_engine_ctranslate2_on_a_checkpoint_translates_its_conversion(trained_run, tmp_path):
    result = run_cli("mt-translate", "--engine", "ctranslate2", "--checkpoint", trained_run, input="hello\n")
    assert result.returncode == 0, result.stderr
    assert "engine: CTranslate2" in result.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("mt-translate", "--engine", "ctranslate2", "--checkpoint", str(empty), input="hello\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ") and "no checkpoint found" in result.stderr


def test_a_gpu_is_asked_for_by_kind_and_index(trained_run, tmp_path, monkeypatch):
    out = tmp_path / "ct2"
    ctranslate2_export.export(checkpoint.load(trained_run, CPU), str(out))
    asked = {}
    monkeypatch.setattr(ctranslate2, "Translator", lambda directory, **options: asked.update(options))
    ctranslate2_engine.load(str(out), torch.device("cuda", 1))
    assert asked["device"] == "cuda" and asked["device_index"] == 1
    ctranslate2_engine.load(str(out), torch.device("cuda"))
    assert asked["device"] == "cuda" and asked["device_index"] == 0


def test_missing_gpu_libraries_are_a_one_line_error(trained_run):
    class WithoutCuBLAS:
        device, num_translators = "cuda", 1

        def translate_batch(self, *args, **kwargs):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    loaded = checkpoint.load(trained_run, CPU)
    search = ctranslate2_engine.Ct2Search(WithoutCuBLAS(), loaded.tokenizer, loaded.config.decode, 64)
    with pytest.raises(UserError, match=r"^CTranslate2 cannot run on cuda: Library libcublas.so.12 is not found"):
        search([[5, 6, 7]])


def test_no_repeat_ngram_reaches_ctranslate2(trained_run, corpus, tmp_path):
    from mt_transformer.decoding.engines import open_translator

    out = tmp_path / "ct2"
    ctranslate2_export.export(checkpoint.load(trained_run, CPU), str(out))
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:40]
    translate = open_translator(str(out), "ctranslate2", "cpu", beam_size=1, max_len_b=30, no_repeat_ngram=1)
    for result in translate(lines):
        assert len(set(result[0].tokens)) == len(result[0].tokens)


def test_forced_prefixes_reach_ctranslate2(trained_run, corpus, tmp_path):
    from mt_transformer.decoding.engines import open_translator

    out = tmp_path / "ct2"
    ctranslate2_export.export(checkpoint.load(trained_run, CPU), str(out))
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:5]
    ours = translator(trained_run, beam_size=2)(lines, prefixes=["Tom"] * 5)
    theirs = open_translator(str(out), "ctranslate2", "cpu", beam_size=2)(lines, prefixes=["Tom"] * 5)
    assert all(r[0].text.startswith("Tom") for r in theirs)
    assert [r[0].text for r in theirs] == [r[0].text for r in ours]


def test_mt_score_with_ctranslate2_scores_as_pytorch(trained_run, corpus, tmp_path):
    out = tmp_path / "ct2"
    ctranslate2_export.export(checkpoint.load(trained_run, CPU), str(out))
    common = ["--src", f"{corpus}/valid.en", "--tgt", f"{corpus}/valid.de", "--per-subword"]
    ours = run_cli("mt-score", "--checkpoint", trained_run, *common)
    theirs = run_cli("mt-score", "--checkpoint", str(out), "--engine", "ctranslate2", *common)
    assert ours.returncode == 0 and theirs.returncode == 0, theirs.stderr
    rows = [[line.split("\t") for line in r.stdout.splitlines()] for r in (ours, theirs)]
    assert len(rows[0]) == len(rows[1]) == len(open(f"{corpus}/valid.en").read().splitlines())
    for a, b in zip(*rows):
        assert len(a[2].split()) == len(b[2].split())
        assert float(a[0]) == pytest.approx(float(b[0]), abs=2e-3)


def test_phrases_to_avoid_reach_ctranslate2_grouped_and_required_ones_are_refused(trained_run, corpus, tmp_path):
    """CTranslate2 suppresses a phrase as the tokenizer splits it, for a whole batch: inputs are
    grouped by their phrases to avoid (our own search avoids a phrase however it is split)."""
    from mt_transformer.decoding.engines import open_translator

    out = tmp_path / "ct2"
    ctranslate2_export.export(checkpoint.load(trained_run, CPU), str(out))
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:6]
    translate = open_translator(str(out), "ctranslate2", "cpu", beam_size=2)
    plain = translate(lines)
    calls = []
    real = translate.search.translator

    class Spy:
        device, num_translators = real.device, real.num_translators

        def translate_batch(self, sources, **options):
            calls.append((len(sources), options["suppress_sequences"]))
            return real.translate_batch(sources, **options)

    translate.search.translator = Spy()
    avoid = [["rotes Haus"] if i % 2 else [] for i in range(6)]
    got = translate(lines, constraints=([[]] * 6, avoid))
    split = translate.tokenizer.tgt.encode(["rotes Haus"], out_type=str)
    assert sorted(calls, key=str) == sorted([(3, None), (3, split)], key=str)
    assert [r[0].text for r in got[::2]] == [r[0].text for r in plain[::2]]
    with pytest.raises(UserError, match="--constraints: needs --engine torch"):
        translate(lines, constraints=([["Tom"]] * 6, [[]] * 6))


def test_a_byte_fallback_vocabulary_translates_the_same_through_ctranslate2(trained_run, corpus, tmp_path):
    from mt_transformer.data.sentencepiece_training import train_tokenizer
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.decoding.translator import torch_translator

    lines = [open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[:2000] for side in ("en", "de")]
    tokenizer = train_tokenizer(str(tmp_path / "tok"), *lines, True, 400, "bpe", 1.0, 10_000, 1, True)
    loaded = checkpoint.load(trained_run, CPU)
    torch.manual_seed(0)
    model = Transformer(loaded.config.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True).eval()
    loaded = dataclasses.replace(loaded, model=model, tokenizer=tokenizer)
    ctranslate2_export.export(loaded, str(tmp_path / "ct2"))
    marks = ["Łódź 😀", "北京 ©", "Þórður"]
    test = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:12]
    unseen = [f"{line} {marks[i % 3]}" for i, line in enumerate(test)]
    config = dataclasses.replace(loaded.config, decode=dataclasses.replace(loaded.config.decode, beam_size=1))
    ours = torch_translator(model, tokenizer, config, CPU)(unseen)
    theirs = open_translator(str(tmp_path / "ct2"), "ctranslate2", "cpu", beam_size=1)(unseen)
    assert any(tokenizer.tgt.is_byte(i) for r in ours for i in r[0].tokens)
    # (CTranslate2 never ends a translation at its first step: outputs that our search left empty differ)
    pairs = [(a[0], b[0]) for a, b in zip(ours, theirs) if a[0].tokens]
    assert len(pairs) >= 2
    assert [(b.tokens, b.text) for _, b in pairs] == [(a.tokens, a.text) for a, _ in pairs]
