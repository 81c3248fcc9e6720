"""--engine auto: CTranslate2 where it has every setting a call asks for, ours for the rest, said once."""

import sys

import pytest
import torch

import mt_transformer as mt
from conftest import run_cli, translator
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.runtime import ours, torch_reason
from mt_transformer.errors import UserError

CPU = torch.device("cpu")
LINES = ["a red house", "the dog", "Tom sold it."]


def test_a_plain_call_runs_on_ctranslate2_and_says_so_once(trained_run):
    result = run_cli("mt-translate", "--checkpoint", trained_run, input="\n".join(LINES) + "\n")
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "engine:" in line]
    assert len(said) == 1 and "CTranslate2 on cpu, float32" in said[0] and "(auto)" in said[0]
    assert len(result.stdout.splitlines()) == len(LINES)
    # greedy search is the same algorithm in both engines: the same outputs
    greedy = run_cli("mt-translate", "--checkpoint", trained_run, "--beam", "1", input="\n".join(LINES) + "\n")
    ours = [t[0].text for t in translator(trained_run, beam_size=1)(LINES)]
    assert greedy.stdout.splitlines() == ours


@pytest.mark.parametrize(
    "paths, decode, needs, reason",
    [
        (2, {}, (), "an ensemble"),
        (1, {}, ("constraints",), "--constraints"),
        (1, {}, ("attention",), "--attention"),
        (1, {}, ("attention_layer",), "--attention-layer"),
        (1, {"sampling": True}, (), "--sampling"),
        (1, {"precision": "bf16"}, (), "bf16, which CTranslate2 does not compute on CPUs"),
    ],
)
def test_what_only_our_engine_does_runs_on_ours(trained_run, paths, decode, needs, reason):
    assert torch_reason([trained_run] * paths, CPU, decode, needs) == reason
    assert open_translator([trained_run] * paths, "auto", "cpu", needs=needs, **decode).runtime.engine == "torch"


def test_what_ctranslate2_does_runs_on_it(trained_run):
    for decode in ({}, {"precision": "fp32"}, {"precision": "int8"}, {"beam_size": 3, "n_best": 2, "alpha": 1.0}):
        assert torch_reason([trained_run], CPU, decode) is None, decode
    int8 = open_translator(trained_run, "auto", "cpu", precision="int8")
    assert int8.runtime.engine == "ctranslate2" and int8.search.translator.compute_type.startswith("int8")
    assert torch_reason([trained_run], torch.device("cuda"), {}) == "cuda: CTranslate2 is chosen on CPUs"


def test_without_ctranslate2_auto_runs_ours_and_says_why(trained_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 now raises ImportError
    result = run_cli("mt-translate", "--checkpoint", trained_run, input="a red house\n")
    assert result.returncode == 0, result.stderr
    assert "engine: ours (PyTorch) on cpu, fp32" in result.stderr
    assert "auto: ctranslate2 cannot be imported (pip install ctranslate2)" in result.stderr


def test_constraints_on_the_default_engine_run_on_ours(trained_run, tmp_path):
    constraints = tmp_path / "constraints.de"
    constraints.write_text("Haus\n", encoding="utf-8")
    args = ["--checkpoint", trained_run, "--beam", "2", "--constraints", str(constraints)]
    result = run_cli("mt-translate", *args, input="a red house\n")
    assert result.returncode == 0, result.stderr
    assert "Haus" in result.stdout and "auto: --constraints" in result.stderr


def test_alignments_through_ctranslate2s_attention_equal_ours(trained_run, tmp_path):
    source = "\n".join(LINES) + "\n"
    args = ["--checkpoint", trained_run, "--beam", "1", "--alignment"]  # greedy: the same translations
    theirs = run_cli("mt-translate", *args, input=source)
    ours = run_cli("mt-translate", *args, "--engine", "torch", input=source)
    assert theirs.returncode == 0 and "engine: CTranslate2" in theirs.stderr, theirs.stderr
    assert theirs.stdout == ours.stdout and all("\t" in line for line in theirs.stdout.splitlines())
    t = open_translator(trained_run, "auto", "cpu")
    src_ids = t.tokenizer.encode_src(LINES[:1])[0]
    outputs = [t(LINES[:1])[0][0].tokens]
    (matrix,) = t.cross_attention(src_ids, outputs)  # the last layer, mean of its heads
    (reference,) = translator(trained_run).cross_attention(src_ids, outputs)
    assert len(matrix) == len(outputs[0]) + 1  # a row per piece, then the step after the last
    assert torch.allclose(matrix, reference[: len(matrix), : len(src_ids)], atol=1e-4)
    # the search's own attention (with_attention: no forced pass) is a forced pass's, batched,
    # greedy, and beam 2 with both hypotheses
    for beam in (1, 2):
        found = open_translator(trained_run, "auto", "cpu", beam_size=beam, n_best=beam).with_attention()(LINES)
        for line, hypotheses in zip(LINES, found):
            forced = t.attention_of(t.source_ids([line]) * beam, [h.tokens for h in hypotheses])
            for h, weights in zip(hypotheses, forced):
                rows = len(h.attention)  # one fewer where a length limit, not EOS, ended the output
                assert rows in (len(weights), len(weights) - 1) and h.attention.shape[1] == weights.shape[1]
                assert torch.allclose(h.attention, weights[:rows], atol=1e-4)
    assert all(r[0].attention is None for r in t(LINES))
    # other layers or heads, and heatmaps, are ours
    layer = run_cli("mt-translate", *args, "--attention-layer", "1", input=source)
    assert layer.returncode == 0 and "auto: --attention-layer" in layer.stderr


def test_the_python_api_runs_ctranslate2_and_ours_for_what_only_ours_does(trained_run):
    m = mt.load(trained_run, device="cpu", beam_size=2)
    assert m.engine == "ctranslate2" and "engine='ctranslate2'" in repr(m)
    assert len(m.translate(LINES)) == len(LINES)
    maps = m.attention(LINES[0])  # our engine, loaded from the same checkpoint on first use
    assert len(maps["cross_attention"]) == 2
    drawn = m.translate(LINES[0], sampling=True, beam_size=1, seed=3)
    assert isinstance(drawn, str) and m.engine == "ctranslate2"
    best = m.translate(LINES[0], n_best=2)
    assert len(best) == 2 and best[0].log_prob == best[0].log_prob  # exact scores, not NaN
    assert mt.load(trained_run, engine="torch", device="cpu").engine == "torch"


def test_ctranslate2_splits_a_call_among_its_workers(trained_run, monkeypatch):
    t = open_translator(trained_run, "auto", "cpu", threads=2, beam_size=1)
    assert t.search.translator.num_translators == 2
    real, asked = t.search.translator, []

    class Spy:
        device, num_translators, compute_type = real.device, real.num_translators, real.compute_type

        def translate_batch(self, sources, **options):
            asked.append((len(sources), options["max_batch_size"]))
            return real.translate_batch(sources, **options)

        def score_batch(self, *args, **options):
            return real.score_batch(*args, **options)

    t.search.translator = Spy()
    t(LINES)
    t(LINES[:1])
    assert asked == [(3, 2), (1, 1)]  # a part per worker; one line on one


def test_loading_ctranslate2_leaves_torchs_thread_count_as_it_was(trained_run):
    threads = torch.get_num_threads()
    open_translator(trained_run, "auto", "cpu", threads=2)  # CTranslate2 sets the OpenMP count torch shares
    assert torch.get_num_threads() == threads


def test_worker_threads_set_the_threads_of_each_ctranslate2_worker_and_nothing_else_does(trained_run):
    from mt_transformer.decoding.engines import describe

    t = open_translator(trained_run, "auto", "cpu", threads=2)
    assert (t.search.translator.num_translators, t.search.worker_threads) == (2, 1)  # the default: 1 each
    t = open_translator(trained_run, "auto", "cpu", threads=2, worker_threads=2)
    assert (t.search.translator.num_translators, t.search.worker_threads) == (1, 2)
    assert describe(t).endswith("float32, 1 worker(s) of 2 thread(s)")
    capped = open_translator(trained_run, "auto", "cpu", threads=2, worker_threads=4)  # no more than --threads
    assert (capped.search.translator.num_translators, capped.search.worker_threads) == (1, 2)
    translated = run_cli(
        "mt-translate", "--checkpoint", trained_run, "--threads", "2", "--worker-threads", "2", input="a red apple\n"
    )
    assert translated.returncode == 0 and "1 worker(s) of 2 thread(s)" in translated.stderr, translated.stderr
    refused = run_cli("mt-translate", "--checkpoint", trained_run, "--worker-threads", "0", input="a\n")
    assert refused.returncode == 2 and "--worker-threads" in refused.stderr


def test_the_runtime_holds_what_runs_and_decode_precision_what_was_asked(trained_run):
    import dataclasses

    from mt_transformer.devices import decode_precision

    t = open_translator(trained_run, "torch", "cpu", precision="auto")
    assert t.decode.precision == "auto" and t.runtime.engine == "torch"
    assert t.runtime.precision == decode_precision(CPU, "auto") and t.runtime.why.startswith("--engine torch")
    fp32 = t.with_settings(precision="fp32")  # a call's own precision: the runtime follows, the original stays
    assert (fp32.runtime.precision, fp32.search.runtime.precision) == ("fp32", "fp32")
    assert t.runtime.precision == decode_precision(CPU, "auto")
    back = fp32.with_settings(precision="auto")
    assert back.runtime.precision == decode_precision(CPU, "auto") and back(LINES)[0][0].text == t(LINES)[0][0].text
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.runtime.engine = "ctranslate2"


def test_int8_on_our_engine_computes_in_fp32_and_says_so(trained_run):
    ensemble = open_translator([trained_run, trained_run], "auto", "cpu", precision="int8")
    assert ensemble.runtime.engine == "torch" and ensemble.runtime.precision == "fp32"
    assert ensemble.runtime.why.endswith("decode.precision int8: fp32 on this cpu")
    fp32 = open_translator([trained_run, trained_run], "auto", "cpu", precision="fp32")
    assert ensemble(LINES)[0][0].text == fp32(LINES)[0][0].text
    with pytest.raises(UserError, match="int8: for the CPU"):
        ours(torch.device("cuda"), "int8")


def test_an_export_runs_on_ctranslate2_only(trained_run, tmp_path):
    out = tmp_path / "ct2"
    assert run_cli("mt-export", "--checkpoint", trained_run, "--format", "ctranslate2", str(out)).returncode == 0
    assert open_translator(str(out), "auto", "cpu").runtime.why == "a CTranslate2 export"
    with pytest.raises(UserError, match="runs on --engine ctranslate2 or auto, not torch"):
        open_translator(str(out), "torch", "cpu")
