"""Importing transformers' M2M100 models in the layouts the hub's NLLB-200 and M2M100 models
have, built tiny and random here, with tokenizers from a sentencepiece model trained here."""

import io
import json
import os
import shutil
import time

import pytest
import torch
from test_huggingface_import import OPUS_MT

from conftest import run_cli

transformers = pytest.importorskip("transformers")
from mt_transformer import checkpoint  # noqa: E402
from mt_transformer.data.batching import encoder_input  # noqa: E402
from mt_transformer.decoding.engines import open_translator  # noqa: E402
from mt_transformer.errors import UserError  # noqa: E402
from mt_transformer.special_tokens import BOS_ID, EOS_ID  # noqa: E402

NLLB_CODES = ["deu_Latn", "eng_Latn", "fra_Latn"]
LINES = ["Ein Hund läuft über die Wiese.", "Zwei Kinder spielen im Park.", "Wiese"]
TARGETS = ["A dog runs across the meadow.", "Two children play in the park.", "meadow"]


def _sentencepiece(corpus: str, path) -> None:
    """A BPE model with NLLB's and M2M100's own ids (unknown 0, start 1, end 2)."""
    import sentencepiece

    lines = []
    for side in ("en", "de"):
        lines += open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[:500]
    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines + LINES + TARGETS),
        model_writer=buffer,
        vocab_size=200,
        model_type="bpe",
        character_coverage=1.0,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        minloglevel=2,
    )
    path.write_bytes(buffer.getvalue())


def _random_m2m100(directory, vocab_size: int) -> None:
    """A random M2M100ForConditionalGeneration as NLLB's config has it, sizes made small; weights
    drawn wide enough that the outputs depend on the input."""
    sizes = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads")
    sizes += ("encoder_ffn_dim", "decoder_ffn_dim")
    config = transformers.M2M100Config(
        vocab_size=vocab_size,
        **{size: OPUS_MT[size] for size in sizes},  # the small sizes of the Marian import's tests
        max_position_embeddings=128,
        dropout=0.1,
        attention_dropout=0.1,
        encoder_layerdrop=0.05,
        decoder_layerdrop=0.05,
        scale_embedding=True,
        init_std=0.2,
    )
    torch.manual_seed(0)
    model = transformers.M2M100ForConditionalGeneration(config)
    model.save_pretrained(str(directory))


def nllb_directory(corpus: str, directory, legacy: bool = False) -> str:
    """NLLB's files: sentencepiece.bpe.model, tokenizer.json and tokenizer_config.json (language
    codes after the pieces), config.json and model.safetensors."""
    directory.mkdir()
    _sentencepiece(corpus, directory / "sentencepiece.bpe.model")
    settings = {"tokenizer_class": "NllbTokenizer", "src_lang": "deu_Latn", "tgt_lang": "eng_Latn"}
    settings |= {"additional_special_tokens": NLLB_CODES, "legacy_behaviour": legacy}
    (directory / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))
    _random_m2m100(directory, len(tokenizer))
    return str(directory)


def m2m100_directory(corpus: str, directory) -> str:
    """M2M100's files: sentencepiece.bpe.model, vocab.json (fairseq's order: <s>, <pad>, </s>,
    <unk>, the pieces), tokenizer_config.json; the languages' __xx__ tokens follow the vocabulary."""
    import sentencepiece

    directory.mkdir()
    _sentencepiece(corpus, directory / "sentencepiece.bpe.model")
    processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab |= {processor.id_to_piece(i): 1 + i for i in range(3, processor.get_piece_size())}
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tokenizer = transformers.M2M100Tokenizer(
        str(directory / "vocab.json"),
        str(directory / "sentencepiece.bpe.model"),
        src_lang="de",
        tgt_lang="en",
        language_codes="wmt21",
        num_madeup_words=0,
    )
    tokenizer.save_pretrained(str(directory))
    _random_m2m100(directory, len(vocab) + len(tokenizer.lang_code_to_id))
    return str(directory)


@pytest.fixture(scope="module", params=["nllb", "nllb_legacy", "m2m100"])
def imported(request, corpus, tmp_path_factory) -> tuple[str, str, dict]:
    """(the transformers model's directory, our import of it, the codes of its source, its target
    and another language; "fr" names the other)."""
    root = tmp_path_factory.mktemp(request.param)
    if request.param.startswith("nllb"):
        source = nllb_directory(corpus, root / "hf", legacy=request.param == "nllb_legacy")
        codes = {"de": "deu_Latn", "en": "eng_Latn", "fr": "fra_Latn"}
    else:
        source, codes = m2m100_directory(corpus, root / "hf"), {"de": "de", "en": "en", "fr": "ru"}  # wmt21's
    out = str(root / "ours")
    result = run_cli("mt-import", "--format", "huggingface", source, out, "--src-lang", codes["de"])
    assert result.returncode == 0, result.stderr
    return source, out, codes


def test_an_import_reads_and_writes_sources_and_targets_as_the_tokenizer_does(imported):
    source, out, codes = imported
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=codes["de"], tgt_lang=codes["en"])
    loaded = checkpoint.load(out, torch.device("cpu"))
    assert loaded.config.data.language_tokens and loaded.config.model.positions == "fairseq"
    assert (loaded.config.data.src_lang, loaded.config.data.tgt_lang) == (codes["de"], codes["en"])
    translator = open_translator(out, "torch", beam_size=1)
    vocab = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8"))
    src_ids = [translator.leads[0] + ids for ids in loaded.tokenizer.encode_src(LINES)]
    tgt_ids = [translator.leads[1] + ids for ids in loaded.tokenizer.encode_tgt(TARGETS)]
    theirs = hf_tokenizer(LINES, text_target=TARGETS)
    legacy = loaded.config.model.source_tag_after_eos  # their sources "text </s> code", as our model reads ours
    assert legacy == getattr(hf_tokenizer, "legacy_behaviour", False)
    for ours, their_ids in zip(src_ids, theirs["input_ids"]):
        ours = encoder_input(ours, legacy)
        assert [vocab[i] for i in ours] == hf_tokenizer.convert_ids_to_tokens(their_ids)
    for ours, their_ids in zip(tgt_ids, theirs["labels"]) if not legacy else ():  # legacy targets: unlike generate()'s
        assert [vocab[i] for i in ours + [EOS_ID]] == hf_tokenizer.convert_ids_to_tokens(their_ids)


@pytest.mark.parametrize("kind", ["nllb", "nllb_legacy", "m2m100"])
def test_a_tokenizer_saved_by_transformers_imports_to_the_same_ids(kind, corpus, tmp_path):
    # transformers 5's save_pretrained writes NLLB's tokenizer as tokenizer.json alone
    if kind == "m2m100":
        original, codes = m2m100_directory(corpus, tmp_path / "hf"), ("de", "en")
    else:
        original, codes = (
            nllb_directory(corpus, tmp_path / "hf", legacy=kind == "nllb_legacy"),
            ("deu_Latn", "eng_Latn"),
        )
    saved = tmp_path / "saved"
    transformers.AutoTokenizer.from_pretrained(original).save_pretrained(str(saved))
    transformers.AutoModelForSeq2SeqLM.from_pretrained(original).save_pretrained(str(saved))
    spm_written = (saved / "sentencepiece.bpe.model").exists()
    assert kind == "m2m100" or not spm_written
    out = str(tmp_path / "ours")
    result = run_cli("mt-import", "--format", "huggingface", str(saved), out, "--src-lang", codes[0])
    assert result.returncode == 0, result.stderr
    assert (saved / "sentencepiece.bpe.model").exists() == spm_written  # made elsewhere, not in their directory
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(saved), src_lang=codes[0], tgt_lang=codes[1])
    loaded = checkpoint.load(out, torch.device("cpu"))
    vocab = json.load(open(os.path.join(out, "vocab.json"), encoding="utf-8"))
    texts = LINES + TARGETS + ["Über  Straßen, café & naïve: 1.234,5 ÄÖÜ!", "ﬁ ① Ｗｉｄｅ"]
    for text, ours in zip(texts, loaded.tokenizer.encode_src(texts)):
        theirs = hf_tokenizer(text, add_special_tokens=False).input_ids
        assert [vocab[i] for i in ours] == hf_tokenizer.convert_ids_to_tokens(theirs), text
    # exported back (checked against our log-probabilities as it is written), its tokenizer splits alike
    back = str(tmp_path / "back")
    result = run_cli("mt-export", "--checkpoint", out, "--format", "huggingface", back)
    assert result.returncode == 0, result.stderr
    named = [f"__{code}__" for code in codes] if kind == "m2m100" else codes  # an NllbTokenizer names M2M100's so
    exported = transformers.AutoTokenizer.from_pretrained(back, src_lang=named[0], tgt_lang=named[1])
    for text in texts:
        theirs = hf_tokenizer.convert_ids_to_tokens(hf_tokenizer(text).input_ids)
        assert exported.convert_ids_to_tokens(exported(text).input_ids) == theirs, text


def test_a_damaged_tokenizer_json_is_one_line(corpus, tmp_path):
    """A tokenizer.json of any other shape, bytes or size, or a link out of the model's directory."""
    original = nllb_directory(corpus, tmp_path / "hf")
    saved = tmp_path / "saved"
    transformers.AutoTokenizer.from_pretrained(original).save_pretrained(str(saved))
    transformers.AutoModelForSeq2SeqLM.from_pretrained(original).save_pretrained(str(saved))
    good = (saved / "tokenizer.json").read_text(encoding="utf-8")
    (tmp_path / "outside.json").write_text(good, encoding="utf-8")
    damaged = {
        "random bytes": os.urandom(1 << 20),
        "a list": b"[" + b"1," * (1 << 19) + b"1]",
        "a string": json.dumps("x" * (1 << 20)).encode(),
        "truncated": good[: len(good) // 2].encode(),
        "nested": b"[" * 100_000 + b"]" * 100_000,
        "not utf-8": b'{"model": "\xff\xfe"}',
        "a model of numbers": json.dumps({"model": {"type": "BPE", "merges": 5, "vocab": []}}).encode(),
        "merges of numbers": json.dumps({**json.loads(good), "model": {"type": "BPE", "merges": [1, 2]}}).encode(),
    }
    for what, content in [*damaged.items(), ("a link out", None)]:
        (saved / "tokenizer.json").unlink()
        if content is None:
            (saved / "tokenizer.json").symlink_to(tmp_path / "outside.json")
        else:
            (saved / "tokenizer.json").write_bytes(content)
        result = run_cli("mt-import", "--format", "huggingface", str(saved), str(tmp_path / what), "--src-lang", "de")
        assert result.returncode == 2, (what, result.stderr[-2000:])
        (line,) = result.stderr.strip().splitlines()
        assert line.startswith(f"error: {saved}") and not os.path.exists(tmp_path / what), (what, line)


def _ids(out: str, hf_tokenizer) -> tuple[torch.Tensor, dict[int, int]]:
    """For each of our ids the id of theirs (our start: their </s>), and theirs -> ours for the others."""
    pieces = json.load(open(f"{out}/vocab.json", encoding="utf-8"))  # their unused <s> is our <unused0>
    order = torch.tensor([0 if p == "<unused0>" else hf_tokenizer.convert_tokens_to_ids(p) for p in pieces])
    order[BOS_ID] = hf_tokenizer.eos_token_id
    return order, {int(theirs): ours for ours, theirs in enumerate(order) if ours != BOS_ID}


def test_an_import_computes_the_originals_log_probabilities_on_sentences(imported):
    source, out, codes = imported
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=codes["de"], tgt_lang=codes["en"])
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    loaded = checkpoint.load(out, torch.device("cpu"))
    model = loaded.model.eval()
    order, inverse = _ids(out, hf_tokenizer)
    batch = hf_tokenizer(LINES[:2], padding=True, return_tensors="pt")
    forced = [loaded.tokenizer.languages[codes["en"]]]
    labels = [forced + ids + [EOS_ID] for ids in loaded.tokenizer.encode_tgt(TARGETS[:2])]  # as generate() writes
    decoder_in = [[order[BOS_ID].item(), *order[ids[:-1]].tolist()] for ids in labels]
    longest = max(map(len, decoder_in))
    decoder_in = torch.tensor([ids + [hf_tokenizer.pad_token_id] * (longest - len(ids)) for ids in decoder_in])
    with torch.inference_mode():
        theirs = hf_model(**batch, decoder_input_ids=decoder_in).logits.log_softmax(-1)  # (batch, tgt_len, vocab)
    for row in range(2):
        src = [inverse[int(i)] for i in batch["input_ids"][row][batch["attention_mask"][row].bool()]]
        with torch.inference_mode():
            tgt_in = torch.tensor([[BOS_ID] + labels[row][:-1]])
            ours = model.logits(model(torch.tensor([src]), tgt_in)).log_softmax(-1)
        outputs = [i for i in range(len(order)) if i != BOS_ID]
        gap = ours[0][:, outputs] - theirs[row, : len(labels[row])][:, order[outputs]]
        assert float(gap.abs().max()) < 1e-4


def test_a_pairs_score_is_the_originals_log_probability_of_it_after_the_forced_language(imported):
    import mt_transformer as mt

    source, out, codes = imported
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=codes["de"])
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    loaded = checkpoint.load(out, torch.device("cpu"))
    forced = loaded.tokenizer.languages[codes["en"]]
    order, _ = _ids(out, hf_tokenizer)
    expected = []
    for line, target in zip(LINES, TARGETS):
        labels = order[[forced, *loaded.tokenizer.encode_tgt([target])[0], EOS_ID]]  # their ids
        decoder_in = torch.cat([torch.tensor([hf_tokenizer.eos_token_id]), labels[:-1]])[None]
        with torch.inference_mode():
            logits = hf_model(**hf_tokenizer(line, return_tensors="pt"), decoder_input_ids=decoder_in).logits
        expected.append(float(logits.log_softmax(-1)[0].gather(1, labels[:, None]).sum()))
    engines = ["torch"] + ["ctranslate2"] * (not loaded.config.model.source_tag_after_eos)
    for engine in engines:
        scores = mt.load(out, engine=engine, tgt_lang=codes["en"], src_lang=codes["de"]).score(LINES, TARGETS)
        assert scores == pytest.approx(expected, abs=1e-3), engine


@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_greedy_translations_are_those_of_generate_with_the_forced_language(imported, engine):
    source, out, codes = imported
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
        if checkpoint.read_config(out).model.source_tag_after_eos:
            with pytest.raises(
                UserError, match="CTranslate2 reads a source as it is given; translate with --engine torch"
            ):
                open_translator(out, engine)
            return
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source, src_lang=codes["de"])
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    _, inverse = _ids(out, hf_tokenizer)
    for language in ("en", "fr"):
        translator = open_translator(
            out, engine, beam_size=1, max_len_a=0.0, max_len_b=12, tgt_lang=codes[language], precision="fp32"
        )
        forced = hf_tokenizer.convert_tokens_to_ids(
            codes[language] if len(codes[language]) > 2 else f"__{codes[language]}__"
        )
        for line, found in zip(LINES, translator(LINES)):
            inputs = hf_tokenizer(line, return_tensors="pt")
            generated = hf_model.generate(
                **inputs, forced_bos_token_id=forced, num_beams=1, do_sample=False, max_new_tokens=12
            )[0, 1:]  # after the decoder start
            theirs = [inverse[int(i)] for i in generated if i != hf_tokenizer.eos_token_id]
            assert found[0].tokens == theirs and theirs[0] == translator.leads[1][0]
            words = hf_tokenizer.decode(generated[1:], skip_special_tokens=True).split()
            assert found[0].text == " ".join(words) and found[0].text


def test_mt_translate_takes_the_languages_and_refuses_one_the_model_lacks(imported, tmp_path):
    _, out, codes = imported
    (tmp_path / "in.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
    into = ("--tgt-lang", codes["fr"], "--src-lang", codes["de"])
    result = run_cli("mt-translate", "--checkpoint", out, "--input", str(tmp_path / "in.txt"), *into, "--beam", "1")
    assert result.returncode == 0, result.stderr
    expected = [t[0].text for t in open_translator(out, "torch", beam_size=1, tgt_lang=codes["fr"])(LINES)]
    assert result.stdout.splitlines() == expected
    result = run_cli("mt-translate", "--checkpoint", out, "--tgt-lang", "xx", input="Hallo\n")
    count = len(json.load(open(f"{out}/languages.json", encoding="utf-8")))  # NLLB here 3, M2M100 (wmt21) 8
    assert (result.returncode, result.stderr) == (
        2,
        f"error: --tgt-lang: 'xx' is not among the model's {count} languages\n",
    )


def test_a_language_the_model_lacks_is_refused_in_one_line(corpus, tmp_path):
    source = nllb_directory(corpus, tmp_path / "nllb")
    out = str(tmp_path / "out")
    result = run_cli("mt-import", "--format", "huggingface", source, out, "--tgt-lang", "xho_Latn")
    assert (result.returncode, result.stderr) == (
        2,
        "error: --tgt-lang: 'xho_Latn' is not among the model's 3 language codes\n",
    )
    assert not os.path.exists(out)


def _text_files(corpus: str, directory, codes: dict[str, str], lines: int = 64) -> None:
    """The corpus's first lines as DIR/{train,valid}.{code}: files named by the model's language codes."""
    for split in ("train", "valid"):
        for side, code in codes.items():
            text = open(f"{corpus}/{split}.{side}", encoding="utf-8").read().splitlines()[:lines]
            (directory / f"{split}.{code}").write_text("\n".join(text) + "\n", encoding="utf-8")


def test_a_trimmed_model_keeps_the_logits_of_the_pieces_it_keeps(corpus, tmp_path):
    source = nllb_directory(corpus, tmp_path / "nllb")
    full, trimmed = str(tmp_path / "full"), str(tmp_path / "trimmed")
    _text_files(corpus, tmp_path, {"de": "deu_Latn", "en": "eng_Latn"}, lines=20)
    assert run_cli("mt-import", "--format", "huggingface", source, full).returncode == 0
    kept = [f"{tmp_path}/train.deu_Latn", f"{tmp_path}/train.eng_Latn"]
    result = run_cli("mt-import", "--format", "huggingface", source, trimmed, "--keep-vocab", *kept)
    assert result.returncode == 0, result.stderr
    big, small = (checkpoint.load(d, torch.device("cpu")) for d in (full, trimmed))
    pieces = {d: json.load(open(f"{d}/vocab.json", encoding="utf-8")) for d in (full, trimmed)}
    assert len(pieces[trimmed]) < len(pieces[full]) and set(pieces[trimmed]) < set(pieces[full])
    assert json.load(open(f"{trimmed}/languages.json")) == {"deu_Latn": "deu_Latn", "eng_Latn": "eng_Latn"}
    rows = torch.tensor([pieces[full].index(p) for p in pieces[trimmed]])  # our trimmed ids in the full model
    line = open(kept[0], encoding="utf-8").readline().strip()
    src = small.tokenizer.encode_src([line])[0]
    assert [pieces[trimmed][i] for i in src] == [pieces[full][i] for i in big.tokenizer.encode_src([line])[0]]
    tgt = src[:6]
    with torch.inference_mode():
        small_logits = small.model.logits(small.model(torch.tensor([src]), torch.tensor([[BOS_ID] + tgt])))
        big_logits = big.model.logits(big.model(rows[torch.tensor([src])], rows[torch.tensor([[BOS_ID] + tgt])]))
    assert torch.allclose(small_logits, big_logits[..., rows], atol=1e-5)
    renormalized = big_logits[..., rows].log_softmax(-1)
    assert torch.allclose(small_logits.log_softmax(-1), renormalized, atol=1e-5)


def test_an_added_language_starts_from_a_related_one_and_fine_tunes(corpus, tmp_path):
    source = nllb_directory(corpus, tmp_path / "nllb")
    out = str(tmp_path / "imported")
    _text_files(corpus, tmp_path, {"de": "gsw_Latn", "en": "eng_Latn"})
    new = ("--add-language", "gsw_Latn", "--init-from", "deu_Latn", "--src-lang", "gsw_Latn")
    kept = ("--keep-vocab", f"{tmp_path}/train.gsw_Latn", f"{tmp_path}/train.eng_Latn")
    result = run_cli("mt-import", "--format", "huggingface", source, out, *new, *kept)
    assert result.returncode == 0, result.stderr
    imported = checkpoint.load(out, torch.device("cpu"))
    languages = imported.tokenizer.languages
    assert set(languages) == {"gsw_Latn", "eng_Latn", "deu_Latn"}
    embedding = imported.model.tgt_embed.weight
    assert torch.equal(embedding[languages["gsw_Latn"]], embedding[languages["deu_Latn"]])
    run_dir = str(tmp_path / "run")
    result = run_cli(
        "mt-train",
        "--config",
        os.path.join(out, "finetune.yaml"),
        "--set",
        f"data.train={tmp_path}/train",
        f"data.valid={tmp_path}/valid",
        f"train.output_dir={run_dir}",
        "train.max_steps=4",
        "train.valid_every=4",
        "train.save_every=4",
        "train.max_tokens=256",
    )
    assert result.returncode == 0, result.stderr
    from mt_transformer.data.prepare import prepare_data

    tuned = checkpoint.load(run_dir, torch.device("cpu"))
    _, encoded, _ = prepare_data(tuned.config.data, run_dir, 0, splits=("train",))
    heads = (languages["gsw_Latn"], languages["eng_Latn"])
    assert {(row["src_ids"][0], row["tgt_ids"][0]) for row in encoded["train"]} == {heads}
    learned = tuned.model.tgt_embed.weight
    assert not torch.allclose(learned[heads[0]], learned[languages["deu_Latn"]])  # it learned the new one
    assert open_translator(run_dir, "torch", beam_size=1)(LINES[:1])[0][0].tokens[0] == heads[1]


def test_an_nllb_import_teaches_a_student_from_two_letter_codes(imported, corpus, tmp_path):
    from mt_transformer.config import DataConfig
    from mt_transformer.training import teacher

    source, out, codes = imported
    prefix = str(tmp_path / "train")
    for side in ("en", "de"):  # the student's files are named de and en, the teacher's codes may not be
        lines = open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[:6]
        open(f"{prefix}.{side}", "w", encoding="utf-8").write("\n".join(lines) + "\n")  # lines: German, last
    data = DataConfig(src_lang="de", tgt_lang="en", train=prefix, teacher=(out,))
    distilled = teacher.distilled_corpora(data, str(tmp_path / "run"), torch.device("cpu"))["data"].train
    expected = open_translator([out], "auto", "cpu", tgt_lang=codes["en"], src_lang=codes["de"])(lines)
    assert open(f"{distilled}.en", encoding="utf-8").read().splitlines() == [t[0].text for t in expected]


def test_a_server_serves_every_pair_of_an_import_by_two_letter_codes(imported):
    fastapi_testclient = pytest.importorskip("fastapi.testclient")
    from mt_transformer.serve.app import ServerSettings, create_app
    from mt_transformer.serve.models import load_models

    _, out, codes = imported
    models = load_models([out], "torch", device="cpu")
    with fastapi_testclient.TestClient(create_app(lambda: models, ServerSettings())) as client:
        deadline = time.monotonic() + 30
        while client.get("/ready").status_code != 200:
            assert client.app.state.server.load_error is None and time.monotonic() < deadline
            time.sleep(0.01)
        listed = {entry["code"]: entry["targets"] for entry in client.get("/languages").json()}
        assert set(listed) >= {"de", "en"} and all(
            set(listed) - {code} == set(targets) for code, targets in listed.items()
        )
        answer = client.post("/translate", json={"q": LINES[0], "source": "de", "target": "en"})
        expected = open_translator(out, "torch", tgt_lang=codes["en"], src_lang=codes["de"])(LINES[:1])[0][0].text
        assert answer.status_code == 200 and answer.json() == {"translatedText": expected}


@pytest.mark.slow
def test_the_readme_imports_trims_fine_tunes_and_teaches_with_nllb(corpus, tmp_path, monkeypatch):
    """The README's four NLLB lines in a fresh directory on 200 lines of each demo file's shape,
    the hub id replaced by an NLLB-shaped model made here (no network) and saved again by
    transformers (tokenizer.json alone), training cut to 2 updates; the fine-tune trains adapters."""
    from conftest import ROOT

    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = [line.split("  #")[0].strip() for block in f.read().split("```")[1::2] for line in block.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("mt-import ") and "nllb" in line)
    commands = lines[start : start + 4]
    assert [c.split()[0] for c in commands] == ["mt-import", "mt-translate", "mt-train", "mt-train"]
    hub_id = commands[0].split()[3]
    source, original = str(tmp_path / "saved"), nllb_directory(corpus, tmp_path / "nllb")
    for kind in (transformers.AutoTokenizer, transformers.AutoModelForSeq2SeqLM):
        kind.from_pretrained(original).save_pretrained(source)
    assert not os.path.exists(os.path.join(source, "sentencepiece.bpe.model"))
    (tmp_path / "data" / "demo").mkdir(parents=True)
    for name in os.listdir(corpus):
        text = open(os.path.join(corpus, name), encoding="utf-8").read().splitlines()[:200]
        (tmp_path / "data" / "demo" / name).write_text("\n".join(text) + "\n", encoding="utf-8")
    shutil.copytree(os.path.join(ROOT, "configs"), tmp_path / "configs")
    monkeypatch.chdir(tmp_path)  # the README's relative paths
    outputs = []
    for command in commands:
        args = command.replace(hub_id, source).split()
        if args[0] == "mt-train":
            args += ["train.max_steps=2", "train.valid_every=2", "train.max_tokens=512", "data.vocab_size=0"]
        result = run_cli(*args)
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    assert outputs[1].count("\n") == (tmp_path / "data" / "demo" / "test.de").read_text(encoding="utf-8").count("\n")
    tuned = tmp_path / "runs" / "nllb-de-en_finetuned" / "checkpoints" / "step_00000002"
    assert checkpoint.read_metadata(str(tuned))["adapters"]["base"] == str(tmp_path / "runs" / "nllb-de-en")
    assert os.path.isdir(tmp_path / "runs" / "student-de-en" / "checkpoints" / "step_00000002")


def test_a_two_way_fine_tune_of_an_import_is_validated_per_pair(corpus, tmp_path):
    import yaml

    source = nllb_directory(corpus, tmp_path / "nllb")
    out = str(tmp_path / "imported")
    assert run_cli("mt-import", "--format", "huggingface", source, out, "--src-lang", "de").returncode == 0
    _text_files(corpus, tmp_path, {"de": "de", "en": "en"}, lines=30)
    config = yaml.safe_load(open(os.path.join(out, "finetune.yaml"), encoding="utf-8"))
    split = {"format": "text", "train": f"{tmp_path}/train", "valid": f"{tmp_path}/valid"}
    config["data"]["corpora"] = [
        {"src_lang": "de", "tgt_lang": "en", **split},
        {"src_lang": "en", "tgt_lang": "de", **split},
    ]
    config["train"] |= {"output_dir": str(tmp_path / "run"), "max_steps": 2, "valid_every": 2, "max_tokens": 256}
    (tmp_path / "two_way.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run_cli("mt-train", "--config", str(tmp_path / "two_way.yaml"))
    assert result.returncode == 0, result.stderr
    logged = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8")]
    valid = next(row for row in logged if "valid_bleu" in row)
    assert {"valid_bleu_de-en", "valid_bleu_en-de"} <= set(valid)
    assert valid["valid_bleu"] == pytest.approx((valid["valid_bleu_de-en"] + valid["valid_bleu_en-de"]) / 2)
