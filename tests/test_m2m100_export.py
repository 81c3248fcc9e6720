"""Exporting an NLLB or M2M100 import back: to transformers' M2M100ForConditionalGeneration with
an NLLB tokenizer (the same function, ids and splits; imported again, the same tensors), trimmed,
with a language added and fine-tuned; and to CTranslate2."""

import json
import os

import pytest
import torch
from test_m2m100_import import LINES, m2m100_directory, nllb_directory

from conftest import run_cli

transformers = pytest.importorskip("transformers")
from mt_transformer import checkpoint  # noqa: E402
from mt_transformer.data.batching import encoder_input  # noqa: E402
from mt_transformer.decoding.engines import open_translator  # noqa: E402
from mt_transformer.special_tokens import BOS_ID  # noqa: E402

CPU = torch.device("cpu")


def _same_tensors(a: str, b: str) -> None:
    first, second = checkpoint.load(a, CPU), checkpoint.load(b, CPU)
    assert first.tokenizer.tgt.pieces == second.tokenizer.tgt.pieces
    assert first.tokenizer.languages == second.tokenizer.languages and first.config.model == second.config.model
    theirs = second.model.state_dict()
    for name, tensor in first.model.state_dict().items():
        if name.split(".")[0] in ("src_embed", "tgt_embed", "output"):  # BOS: a row no M2M100 has
            tensor, theirs[name] = (t[torch.arange(len(t)) != BOS_ID] for t in (tensor, theirs[name]))
        assert torch.equal(tensor, theirs[name]), name


def _export_matches_ours(ours: str, exported: str, src: str, tgt: str, lines: list[str]) -> None:
    """The export's tokenizer gives our ids (in its order) and its generate() our greedy outputs;
    `src` and `tgt`: our codes of the languages, whose tokens its tokenizer takes."""
    loaded = checkpoint.load(ours, CPU)
    pieces, languages = loaded.tokenizer.tgt.pieces, loaded.tokenizer.languages
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(exported, src_lang=pieces[languages[src]])
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).eval()
    translator = open_translator(ours, "torch", beam_size=1, max_len_a=0.0, max_len_b=10, src_lang=src, tgt_lang=tgt)
    forced = hf_tokenizer.convert_tokens_to_ids(pieces[languages[tgt]])
    for line, found in zip(lines, translator(lines)):
        inputs = hf_tokenizer(line, return_tensors="pt")
        legacy = loaded.config.model.source_tag_after_eos  # "text </s> code"
        ids = encoder_input([languages[src], *loaded.tokenizer.encode_src([line])[0]], legacy)
        assert hf_tokenizer.convert_ids_to_tokens(inputs.input_ids[0]) == [
            "<s>" if p == "<unused0>" else p for p in [pieces[i] for i in ids]
        ]
        generated = hf_model.generate(**inputs, forced_bos_token_id=forced, num_beams=1, max_new_tokens=11)[0, 1:]
        assert hf_tokenizer.convert_ids_to_tokens(generated[generated != 2]) == [pieces[i] for i in found[0].tokens]


@pytest.mark.parametrize("kind", ["nllb", "nllb_legacy", "m2m100"])
def test_an_import_exported_again_is_the_original_model(corpus, tmp_path, kind):
    src, tgt = ("de", "en") if kind == "m2m100" else ("deu_Latn", "eng_Latn")
    if kind == "m2m100":
        source = m2m100_directory(corpus, tmp_path / "hf")
    else:
        source = nllb_directory(corpus, tmp_path / "hf", legacy=kind == "nllb_legacy")
    ours, exported, again = (str(tmp_path / name) for name in ("ours", "exported", "again"))
    assert run_cli("mt-import", "--format", "huggingface", source, ours, "--src-lang", src).returncode == 0
    result = run_cli("mt-export", "--checkpoint", ours, "--format", "huggingface", exported)
    assert result.returncode == 0, result.stderr
    assert json.load(open(f"{exported}/config.json"))["architectures"] == ["M2M100ForConditionalGeneration"]
    original = transformers.AutoModelForSeq2SeqLM.from_pretrained(source).state_dict()
    back = transformers.AutoModelForSeq2SeqLM.from_pretrained(exported).state_dict()
    assert all(torch.allclose(back[name], tensor, atol=1e-6) for name, tensor in original.items() if name in back)
    _export_matches_ours(ours, exported, src, tgt, LINES)
    assert run_cli("mt-import", "--format", "huggingface", exported, again).returncode == 0
    _same_tensors(ours, again)


def test_a_trimmed_fine_tuned_import_with_a_new_language_exports_and_comes_back(corpus, tmp_path):
    source = nllb_directory(corpus, tmp_path / "nllb")
    for side, code in (("de", "gsw_Latn"), ("en", "eng_Latn")):
        for split in ("train", "valid"):
            text = open(f"{corpus}/{split}.{side}", encoding="utf-8").read().splitlines()[:40]
            (tmp_path / f"{split}.{code}").write_text("\n".join(text) + "\n", encoding="utf-8")
    imported = str(tmp_path / "imported")
    kept = (f"{tmp_path}/train.gsw_Latn", f"{tmp_path}/train.eng_Latn")
    options = ("--src-lang", "gsw_Latn", "--add-language", "gsw_Latn", "--init-from", "deu_Latn", "--keep-vocab", *kept)
    assert run_cli("mt-import", "--format", "huggingface", source, imported, *options).returncode == 0
    run_dir = str(tmp_path / "run")
    keys = [f"data.train={tmp_path}/train", f"data.valid={tmp_path}/valid", f"train.output_dir={run_dir}"]
    keys += ["train.max_steps=3", "train.valid_every=3", "train.save_every=3", "train.max_tokens=256"]
    result = run_cli("mt-train", "--config", os.path.join(imported, "finetune.yaml"), "--set", *keys)
    assert result.returncode == 0, result.stderr
    exported, again = str(tmp_path / "exported"), str(tmp_path / "again")
    result = run_cli("mt-export", "--checkpoint", run_dir, "--format", "huggingface", exported)
    assert result.returncode == 0, result.stderr
    lines = open(kept[0], encoding="utf-8").read().splitlines()[:8]
    _export_matches_ours(run_dir, exported, "gsw_Latn", "eng_Latn", lines)
    assert run_cli("mt-import", "--format", "huggingface", exported, again).returncode == 0
    _same_tensors(checkpoint.resolve(run_dir), again)


def test_an_import_exports_to_ctranslate2_and_translates_as_ours(corpus, tmp_path):
    pytest.importorskip("ctranslate2")
    source = nllb_directory(corpus, tmp_path / "nllb")
    ours, exported = str(tmp_path / "ours"), str(tmp_path / "ct2")
    assert run_cli("mt-import", "--format", "huggingface", source, ours).returncode == 0
    result = run_cli("mt-export", "--checkpoint", ours, "--format", "ctranslate2", exported)
    assert result.returncode == 0, result.stderr
    into = dict(tgt_lang="fra_Latn", beam_size=2, precision="fp32")
    theirs = open_translator(exported, "ctranslate2", **into)(LINES)
    assert [t[0].tokens for t in theirs] == [t[0].tokens for t in open_translator(ours, "torch", **into)(LINES)]


def test_a_lora_fine_tune_of_an_import_learns_and_exports_merged(corpus, tmp_path):
    """finetune.yaml with train.lora: the adapters learn the held-out pairs (valid loss falls), and
    the transformers export of the run (the adapters merged) generates what the run does."""
    import json as json_module

    source = nllb_directory(corpus, tmp_path / "nllb")
    for side, code in (("de", "deu_Latn"), ("en", "eng_Latn")):
        for split, lines in (("train", slice(0, 200)), ("valid", slice(200, 240))):
            text = open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[lines]
            (tmp_path / f"{split}.{code}").write_text("\n".join(text) + "\n", encoding="utf-8")
    imported, run_dir = str(tmp_path / "imported"), str(tmp_path / "run")
    assert run_cli("mt-import", "--format", "huggingface", source, imported, "--src-lang", "deu_Latn").returncode == 0
    keys = [f"data.train={tmp_path}/train", f"data.valid={tmp_path}/valid", f"train.output_dir={run_dir}"]
    keys += ["train.max_steps=30", "train.valid_every=30", "train.max_tokens=512", "train.lora.rank=8"]
    keys += ["train.schedule=budget", "train.peak_lr=0.01", "train.lora.targets=[q_proj, kv_proj, out_proj, linear1]"]
    result = run_cli("mt-train", "--config", os.path.join(imported, "finetune.yaml"), "--set", *keys)
    assert result.returncode == 0, result.stderr
    assert "train.lora: rank 8 adapters" in result.stderr
    assert "set train.lora.rank" in open(os.path.join(imported, "finetune.yaml"), encoding="utf-8").read()
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        valid = [m["valid_loss"] for m in map(json_module.loads, f) if "valid_loss" in m]
    assert valid[-1] < valid[0] - 0.1, valid
    exported = str(tmp_path / "exported")
    result = run_cli("mt-export", "--checkpoint", run_dir, "--format", "huggingface", exported)
    assert result.returncode == 0, result.stderr
    lines = open(f"{tmp_path}/valid.deu_Latn", encoding="utf-8").read().splitlines()[:6]
    _export_matches_ours(run_dir, exported, "deu_Latn", "eng_Latn", lines)
