"""Translating lines: batching, inputs too long for the model, out-of-memory while decoding."""

import logging
import math
import os

import pytest
import torch

from conftest import load_model, run_cli, token_log_probs, translator
from mt_transformer import devices
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.torch_search import TorchSearch
from mt_transformer.decoding.translator import source_batches
from mt_transformer.errors import UserError

CPU = torch.device("cpu")


def test_source_batches_skip_empty_inputs_and_respect_the_budget():
    lengths = [3, 0, 9, 4, 20, 1]
    batches = source_batches(lengths, max_tokens=12)
    assert sorted(i for b in batches for i in b) == [0, 2, 3, 4, 5]
    assert batches[0] == [4]  # longer than the budget on its own: a batch of its own
    for batch in batches[1:]:
        assert (max(lengths[i] for i in batch) + 1) * len(batch) <= 12


def test_a_line_of_100000_characters_is_translated_in_parts(trained_run, corpus, tmp_path):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:3]
    long_line = " ".join(lines[0] for _ in range(2000))[:100_000]
    source = tmp_path / "in.en"
    source.write_text("\n".join([lines[1], long_line, "", lines[2]]) + "\n", encoding="utf-8")
    out = tmp_path / "out.de"
    result = run_cli("mt-translate", "--checkpoint", trained_run, "-i", str(source), "-o", str(out), "--beam", "2")
    assert result.returncode == 0, result.stderr
    assert "line 2: " in result.stderr and "more than 48: translated in" in result.stderr  # data.max_len is 48
    translated = out.read_text(encoding="utf-8").split("\n")
    assert len(translated) == 5 and translated[4] == "" and translated[2] == ""
    short = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "2", input=lines[1] + "\n" + lines[2] + "\n")
    assert [translated[0], translated[3]] == short.stdout.splitlines()  # the other lines are unaffected
    assert len(translated[1]) > 10 * len(translated[0])  # every part was translated, none dropped


def test_max_input_len_option_cuts_inputs(trained_run, corpus, caplog):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:4]
    with caplog.at_level(logging.WARNING, logger="mt_transformer"):
        whole = translator(trained_run, beam_size=1)(lines)
        cut = translator(trained_run, beam_size=1, max_input_len=4)(lines)
    assert "translated in" in caplog.text and len(cut) == len(lines)
    assert [t[0].text for t in whole] != [t[0].text for t in cut]
    assert all(t[0].text for t in cut)


@pytest.mark.parametrize("beam", [1, 3])
def test_out_of_memory_while_decoding_halves_the_batch_then_the_input(trained_run, corpus, monkeypatch, caplog, beam):
    translate = translator(trained_run, beam_size=beam, n_best=beam)
    tokenizer = translate.tokenizer
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:8] + [""]
    expected = translate(lines)
    real_search = TorchSearch.search

    def search(self, sources, prefixes=None, constraints=None):
        if len(sources) > 2 or max(map(len, sources)) > 22:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real_search(self, sources, prefixes, constraints)

    monkeypatch.setattr(TorchSearch, "search", search)
    with caplog.at_level(logging.WARNING, logger="mt_transformer"):
        got = translate(lines)
    assert "halving the batch" in caplog.text and "translating it in two parts" in caplog.text
    assert len(got) == len(lines) and got[-1][0].text == ""
    assert all(len(t) == beam for t in got[:-1])
    lengths = [len(ids) for ids in tokenizer.encode_src(lines[:-1])]
    assert min(lengths) <= 22 < max(lengths)
    for i, length in enumerate(lengths):
        if length <= 22:  # inputs that fitted translate exactly as without the error
            assert [t.tokens for t in got[i]] == [t.tokens for t in expected[i]]
        else:  # the others in parts, still translated
            assert got[i][0].tokens


@pytest.mark.parametrize("beam", [1, 3])
def test_a_forced_prefix_scores_as_teacher_forcing_and_the_search_continues_after_it(trained_run, corpus, beam):
    model, tokenizer = load_model(trained_run, torch.device("cpu"))
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:6]
    references = open(f"{corpus}/test.de", encoding="utf-8").read().splitlines()[:6]
    # the whole reference forced, then EOS at once: the model's teacher-forced log-probability
    forced = translator(trained_run, beam_size=beam, max_len_a=0, max_len_b=0)(lines, prefixes=references)
    for line, reference, result in zip(tokenizer.encode_src(lines), tokenizer.tgt.encode(references), forced):
        assert result[0].tokens == reference
        assert result[0].log_prob == pytest.approx(float(token_log_probs(model, line, reference).sum()), abs=1e-4)
    # forcing the start a free search chose changes nothing; forcing another start is followed
    free = translator(trained_run, beam_size=1)(lines)
    starts = [tokenizer.tgt.decode(r[0].tokens[:2]) for r in free]
    again = translator(trained_run, beam_size=1)(lines, prefixes=starts)
    assert [r[0].text for r in again] == [r[0].text for r in free]
    other = translator(trained_run, beam_size=beam)(lines, prefixes=["Tom"] * len(lines))
    assert all(r[0].text.startswith("Tom") for r in other)


def test_a_line_in_capitals_is_translated_into_capitals_unless_a_prefix_says_otherwise(trained_run, corpus):
    lines = [line.upper() for line in open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:4]]
    translated = translator(trained_run, beam_size=2)(lines + ["a red apple"])
    assert all(r[0].text == r[0].text.upper() and r[0].text for r in translated[:4])
    assert translated[4][0].text != translated[4][0].text.upper()
    forced = translator(trained_run, beam_size=2)(lines[:1], prefixes=["Tom"])
    assert forced[0][0].text.startswith("Tom")


def test_mt_translate_takes_one_prefix_per_line(trained_run, tmp_path):
    prefixes = tmp_path / "prefixes.de"
    prefixes.write_text("Tom\n\n", encoding="utf-8")
    args = ["--checkpoint", trained_run, "--device", "cpu", "--prefix", str(prefixes)]
    result = run_cli("mt-translate", *args, input="Tom sold it.\na red apple\n")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("Tom")
    result = run_cli("mt-translate", *args, input="one line\n")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == f"error: --prefix: {prefixes} has 2 lines, the input 1"


@pytest.mark.parametrize("beam", [1, 3])
def test_decode_precision_bf16_runs_the_matrix_products_in_bf16_and_scores_in_float32(trained_run, corpus, beam):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:4]
    seen = {}
    for precision in ("fp32", "bf16"):
        translate = translator(trained_run, beam_size=beam, precision=precision)
        seen[precision] = set()
        # the decoder's first product, seen where its output goes (the engine's steps call modules
        # through forward, without hooks)
        ffn = translate.model.decoder[0].ffn
        activation = ffn.activation
        ffn.activation = lambda x, dtypes=seen[precision], f=activation: dtypes.add(x.dtype) or f(x)
        results = translate(lines)
        ffn.activation = activation
        assert len(results) == len(lines)
        assert all(math.isfinite(r[0].log_prob) and r[0].log_prob < 0 for r in results)
        assert all(p.dtype == torch.float32 for p in translate.model.parameters())  # autocast casts per product
    assert seen == {"fp32": {torch.float32}, "bf16": {torch.bfloat16}}


@pytest.mark.parametrize(
    ("flags", "dtype"), [(["avx2", "fma"], torch.float32), (["avx2", "avx512f", "avx512_bf16"], torch.bfloat16)]
)
def test_decode_precision_auto_decodes_in_bf16_where_the_cpu_has_bf16_units(trained_run, monkeypatch, flags, dtype):
    monkeypatch.setattr(devices, "cpu_info", lambda: ("x86", flags))
    translate = translator(trained_run, beam_size=2, precision="auto")
    assert translate.runtime.precision == ("bf16" if dtype == torch.bfloat16 else "fp32")
    seen = set()
    ffn = translate.model.decoder[0].ffn  # its first product's dtype, seen where its output goes
    activation = ffn.activation
    ffn.activation = lambda x: seen.add(x.dtype) or activation(x)
    assert len(translate(["a b c"])) == 1
    ffn.activation = activation
    assert seen == {dtype}


def test_mt_translate_precision_flag_warns_where_it_is_slow_and_is_for_the_torch_engine(trained_run, monkeypatch):
    monkeypatch.setattr(devices, "cpu_info", lambda: ("AMD EPYC", ["avx2", "fma"]))
    result = run_cli("mt-translate", "--checkpoint", trained_run, "--precision", "bf16", "--beam", "2", input="a b\n")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1
    assert "decode.precision: AMD EPYC has no bf16 units" in result.stderr
    ct2 = run_cli("mt-translate", "--checkpoint", trained_run, "--engine", "ctranslate2", "--precision", "fp16")
    assert ct2.returncode == 2
    assert ct2.stderr.strip() == (
        "error: --precision: bf16 and fp16 are for --engine torch; CTranslate2 takes --compute-type"
    )


def test_int8_translates_and_scores_from_the_command_line_on_the_cpu(trained_run, tmp_path):
    result = run_cli("mt-translate", "--checkpoint", trained_run, "--precision", "int8", input="a b\nthe dog\n")
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 2
    src, tgt = tmp_path / "src.en", tmp_path / "tgt.de"
    src.write_text("the dog\n", encoding="utf-8")
    tgt.write_text("der Hund\n", encoding="utf-8")
    args = ["--checkpoint", trained_run, "--precision", "int8", "--src", str(src), "--tgt", str(tgt)]
    scored = run_cli("mt-score", *args)
    assert scored.returncode == 0, scored.stderr
    assert float(scored.stdout.split()[0]) < 0


@pytest.mark.gpu
def test_int8_is_refused_on_a_gpu(trained_run):
    with pytest.raises(UserError, match="int8: for the CPU"):
        open_translator(trained_run, "torch", "cuda", precision="int8")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_half_precision_decoding_on_cuda_matches_fp32_on_most_lines(trained_run, corpus, precision):
    lines = open(f"{corpus}/test.en", encoding="utf-8").read().splitlines()[:40]
    fp32 = [r[0].text for r in open_translator(trained_run, "torch", "cuda", beam_size=4)(lines)]
    half = [r[0].text for r in open_translator(trained_run, "torch", "cuda", beam_size=4, precision=precision)(lines)]
    # rounding may flip a close choice; a broken cast would change nearly every line
    assert sum(a == b for a, b in zip(fp32, half)) >= 0.75 * len(lines)


def test_loading_a_translator_on_the_cpu_limits_onednn_kernel_cache_unless_the_user_set_it(trained_run, monkeypatch):
    monkeypatch.delenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", raising=False)
    open_translator(trained_run, "torch", device="cpu")
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == str(devices.ONEDNN_KERNEL_CACHE)
    monkeypatch.setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "2048")
    open_translator(trained_run, "torch", device="cpu")
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == "2048"
