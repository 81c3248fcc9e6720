"""Importing transformers models: the model settings of a Marian or Pegasus config, and a one-line
refusal for what we do not model."""

import dataclasses
import importlib.util
import json
import os
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import ROOT, Payload, perturbed_model, run_cli, token_log_probs, write_config
from mt_transformer import checkpoint
from mt_transformer.errors import UserError

transformers = pytest.importorskip("transformers")
from mt_transformer.exchange import huggingface_export, huggingface_layout  # noqa: E402
from mt_transformer.exchange.huggingface_import import import_model, model_config  # noqa: E402

CPU = torch.device("cpu")

# the fields an OPUS-MT model's config.json holds (Helsinki-NLP/opus-mt-*), sizes made small
OPUS_MT = dict(
    vocab_size=101,
    decoder_vocab_size=101,
    d_model=16,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=32,
    decoder_ffn_dim=32,
    activation_function="swish",
    dropout=0.1,
    attention_dropout=0.0,
    activation_dropout=0.0,
    max_position_embeddings=512,
    scale_embedding=True,
    share_encoder_decoder_embeddings=True,
    static_position_embeddings=True,
    add_bias_logits=False,
    add_final_layer_norm=False,
    normalize_before=False,
    normalize_embedding=False,
    encoder_layerdrop=0.0,
    decoder_layerdrop=0.0,
    pad_token_id=100,
    eos_token_id=0,
    decoder_start_token_id=100,
)


def test_an_opus_mt_config_is_a_post_norm_swish_model():
    settings = model_config(transformers.MarianConfig(**OPUS_MT))
    assert (settings.norm, settings.positions, settings.activation) == ("post", "sinusoidal", "swish")
    assert (settings.d_model, settings.n_heads, settings.d_ff) == (16, 2, 32)
    assert (settings.encoder_layers, settings.decoder_layers, settings.max_positions) == (2, 2, 512)
    assert (settings.dropout, settings.attention_dropout, settings.tie_embeddings) == (0.1, 0.0, True)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_the_config_of_our_export_gives_our_model_settings(trained_run, norm):
    loaded = checkpoint.load(trained_run, CPU)
    ours = dataclasses.replace(loaded.config.model, norm=norm, activation="gelu")
    loaded = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, model=ours))
    hf_config = huggingface_export.hf_config(loaded, "marian" if norm == "post" else "pegasus")
    assert model_config(hf_config) == ours


@pytest.mark.parametrize(
    "change, says",
    [
        (
            dict(activation_function="tanh"),
            "activation_function: 'tanh' is not modelled here (only gelu, relu, silu, swish)",
        ),
        (
            dict(decoder_ffn_dim=64),
            "decoder_ffn_dim: 64 differs from encoder_ffn_dim (32); our encoder and decoder have one size",
        ),
        (dict(activation_dropout=0.1), "activation_dropout: 0.1 is not modelled here (only 0.0 is)"),
        (dict(normalize_embedding=True), "normalize_embedding: True is not modelled here (only False is)"),
        (dict(scale_embedding=False), "scale_embedding: False is not modelled here (only True is)"),
    ],
)
def test_a_field_we_do_not_model_is_refused_by_name(change, says):
    with pytest.raises(UserError) as refusal:
        model_config(transformers.MarianConfig(**{**OPUS_MT, **change}))
    assert str(refusal.value) == says


def test_a_model_other_than_marian_or_pegasus_is_refused():
    with pytest.raises(
        UserError, match=r"^model_type: 'bart': only Marian, Pegasus and M2M100 \(NLLB\) models can be imported$"
    ):
        model_config(transformers.BartConfig())


@pytest.mark.parametrize("norm, tie", [("post", True), ("post", False), ("pre", True)])
def test_an_export_imports_to_the_same_model(trained_run, tmp_path, norm, tie):
    loaded = checkpoint.load(trained_run, CPU)
    settings = dict(norm=norm, tie_embeddings=tie, activation="swish", output_bias=True)
    ours = dataclasses.replace(loaded.config.model, **settings)
    loaded = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, model=ours))
    original = perturbed_model(ours, loaded.tokenizer.src_vocab_size, loaded.tokenizer.tgt_vocab_size, True)
    huggingface_export.export(dataclasses.replace(loaded, model=original), str(tmp_path / "hf"))
    model, config = import_model(transformers.AutoModelForSeq2SeqLM.from_pretrained(str(tmp_path / "hf")))
    assert config == ours
    expected, imported = original.state_dict(), model.state_dict()
    assert expected.keys() == imported.keys()
    assert all(torch.equal(imported[name], tensor) for name, tensor in expected.items())


def test_an_opus_mt_shaped_model_imports_with_its_output_bias():
    torch.manual_seed(0)
    hf_model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT)).eval()
    with torch.no_grad():
        hf_model.final_logits_bias.normal_()  # OPUS-MT's output layer has a bias
    model, config = import_model(hf_model)  # refused if the log-probabilities differ
    assert config.output_bias and config.activation == "swish"
    assert torch.equal(model.output.bias, hf_model.final_logits_bias[0])


def test_an_import_that_computes_something_else_is_refused(monkeypatch):
    torch.manual_seed(0)
    hf_model = transformers.MarianMTModel(transformers.MarianConfig(**OPUS_MT)).eval()
    monkeypatch.setattr(
        huggingface_layout, "stream_order", lambda d: torch.arange(d)
    )  # the sinusoid left in their order
    with pytest.raises(UserError, match=r"^the imported model differs from the original by .* in log-probability$"):
        import_model(hf_model)


# --- OPUS-MT-shaped models with their Marian tokenizers, made in the test --------------------


def _sentencepiece(lines: list[str], path, size: int) -> list[str]:
    """A sentencepiece model with its own ids (unknown 0, start 1, end 2, as OPUS-MT's) at
    `path`; returns its ordinary pieces."""
    import io

    import sentencepiece

    buffer = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=buffer, vocab_size=size, character_coverage=1.0, minloglevel=2
    )
    path.write_bytes(buffer.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
    return [processor.id_to_piece(i) for i in range(3, processor.get_piece_size())]


def _marian_vocabulary(pieces: list[str], tags: list[str], pad: int | None = None) -> dict[str, int]:
    """Marian's order: end of sentence 0, unknown 1, then tags and pieces, padding last (or at
    `pad`: transformers has one padding id for both sides)."""
    ordinary = [">>" + tag + "<<" for tag in tags] + list(dict.fromkeys(pieces))
    pad = len(ordinary) + 2 if pad is None else pad
    ids = [i for i in range(2, len(ordinary) + 3) if i != pad]
    return {"</s>": 0, "<unk>": 1, **dict(zip(ordinary, ids)), "<pad>": pad}


def opus_mt_directory(corpus: str, directory, separate=False, activation="swish", tags=()) -> str:
    """A random MarianMTModel laid out as OPUS-MT publishes one: two sentencepiece models, a
    Marian vocabulary (one, or one per side), padding as the decoder start, a logits bias."""
    directory.mkdir()
    source = open(f"{corpus}/train.en", encoding="utf-8").read().splitlines()
    target = open(f"{corpus}/train.de", encoding="utf-8").read().splitlines()
    src_pieces = _sentencepiece(source, directory / "src.spm", 160)
    tgt_pieces = _sentencepiece(target, directory / "tgt.spm", 140)
    tgt_vocab = _marian_vocabulary(tgt_pieces if separate else src_pieces + tgt_pieces, list(tags))
    vocab = _marian_vocabulary(src_pieces, [], tgt_vocab["<pad>"]) if separate else tgt_vocab
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "tgt_vocab.json").write_text(json.dumps(tgt_vocab), encoding="utf-8")
    pad = tgt_vocab["<pad>"]
    sizes = dict(vocab_size=len(vocab), decoder_vocab_size=len(tgt_vocab), max_position_embeddings=128)
    special = dict(pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0)
    config = transformers.MarianConfig(
        **{
            **OPUS_MT,
            **sizes,
            **special,
            "activation_function": activation,
            "share_encoder_decoder_embeddings": not separate,
        },
        init_std=0.2,  # logits that depend on the input (at 0.02 the bias decides every token)
    )
    torch.manual_seed(0)
    hf_model = transformers.MarianMTModel(config).eval()
    with torch.no_grad():
        hf_model.final_logits_bias.normal_()
        hf_model.final_logits_bias[0, tgt_vocab["<unk>"]] = -30.0  # unknowns would detokenize differently
    hf_model.save_pretrained(str(directory))
    hf_tokenizer = transformers.MarianTokenizer(
        source_spm=str(directory / "src.spm"),
        target_spm=str(directory / "tgt.spm"),
        vocab=str(directory / "vocab.json"),
        target_vocab_file=str(directory / "tgt_vocab.json") if separate else None,
        separate_vocabs=separate,
        source_lang="en",
        target_lang="de",
    )
    hf_tokenizer.save_pretrained(str(directory))
    for name in ("src.spm", "tgt.spm", "tgt_vocab.json"):
        (directory / name).unlink()
    return str(directory)


LINES = ["The red apples were sold on March fifth.", "Tom bought twenty green shirts.", "Hello"]


@pytest.mark.parametrize(
    "kind, tags",
    [("shared swish", ()), ("separate relu", ()), ("shared swish", ("de", "fr"))],
    ids=["shared", "separate", "multilingual"],
)
def test_an_opus_mt_model_imports_with_its_tokenizer(corpus, tmp_path, kind, tags):
    sharing, activation = kind.split()
    source = opus_mt_directory(corpus, tmp_path / "opus", sharing == "separate", activation, tags)
    out = str(tmp_path / "imported")
    result = run_cli("mt-import", "--format", "huggingface", source, out)
    assert result.returncode == 0, result.stderr
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(source).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    loaded = checkpoint.load(out, CPU)
    assert loaded.config.model.activation == activation and loaded.config.model.output_bias
    prefix = ">>de<< " if tags else ""
    assert loaded.config.data.target_languages == (sorted(tags) or ["de"])

    # the same tokens: our ids are a reordering of theirs, the same pieces
    targets = ["Die roten Äpfel wurden verkauft.", "Tom kaufte zwanzig Hemden."]
    theirs = hf_tokenizer([prefix + line for line in LINES[:2]], text_target=targets)
    tag = ["<2de>"] if tags else []
    ours_src = loaded.tokenizer.encode_src([" ".join(tag + [line]) for line in LINES[:2]])
    ours_tgt = loaded.tokenizer.encode_tgt(targets)
    for ids, line in zip(ours_src, LINES[:2]):
        named = [p.replace(">>de<<", "<2de>") for p in hf_tokenizer.tokenize(prefix + line)]
        assert loaded.tokenizer.src_pieces(ids) == named
    # per-token log-probabilities of the reference translations agree within 1e-4
    for src_ids, tgt_ids, their_src, their_tgt in zip(ours_src, ours_tgt, theirs["input_ids"], theirs["labels"]):
        ours = token_log_probs(loaded.model, src_ids, tgt_ids)
        with torch.no_grad():
            logits = hf_model(input_ids=torch.tensor([their_src]), labels=torch.tensor([their_tgt])).logits
        expected = logits.log_softmax(-1)[0].gather(1, torch.tensor(their_tgt)[:, None])[:, 0]
        assert len(ours) == len(expected) and (ours - expected).abs().max() < 1e-4

    # greedy decoding: mt-translate --beam 1 writes what generate(num_beams=1) writes, given our
    # length limit (decode.max_len_a * source length + decode.max_len_b, then EOS)
    tgt_lang = ["--tgt-lang", "de"] if tags else []
    translated = run_cli("mt-translate", "--checkpoint", out, "--beam", "1", *tgt_lang, input="\n".join(LINES) + "\n")
    assert translated.returncode == 0, translated.stderr
    decode, expected = loaded.config.decode, []
    for line in LINES:
        batch = hf_tokenizer([prefix + line], return_tensors="pt")
        limit = int(decode.max_len_a * (batch["input_ids"].size(1) - 1) + decode.max_len_b)
        pad = hf_model.config.pad_token_id
        generated = hf_model.generate(
            **batch,
            num_beams=1,
            do_sample=False,
            max_new_tokens=limit + 1,
            bad_words_ids=[[pad]],
            forced_eos_token_id=0,
        )
        expected += hf_tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert translated.stdout.splitlines() == expected
    if sharing == "shared" and not tags and importlib.util.find_spec("ctranslate2"):  # the import exports on
        exported = str(tmp_path / "ct2")
        assert run_cli("mt-export", "--checkpoint", out, "--format", "ctranslate2", exported).returncode == 0
        engine = ["--engine", "ctranslate2", "--beam", "1"]
        again = run_cli("mt-translate", "--checkpoint", exported, *engine, input="\n".join(LINES) + "\n")
        assert again.returncode == 0 and again.stdout == translated.stdout


@pytest.fixture(scope="module")
def imported_run(trained_run, tmp_path_factory) -> str:
    """The trained test model exported to transformers and imported back."""
    directory = tmp_path_factory.mktemp("round_trip")
    exported = run_cli("mt-export", "--checkpoint", trained_run, "--format", "huggingface", str(directory / "hf"))
    assert exported.returncode == 0, exported.stderr
    imported = run_cli("mt-import", "--format", "huggingface", str(directory / "hf"), str(directory / "imported"))
    assert imported.returncode == 0, imported.stderr
    return str(directory / "imported")


def test_an_export_imported_back_has_the_same_tensors_and_translations(trained_run, imported_run, corpus):
    original, imported = checkpoint.load(trained_run, CPU), checkpoint.load(imported_run, CPU)
    assert imported.config.model == original.config.model
    expected, found = original.model.state_dict(), imported.model.state_dict()
    assert expected.keys() == found.keys()
    assert all(torch.equal(found[name], tensor) for name, tensor in expected.items())
    lines = open(f"{corpus}/test.en", encoding="utf-8").read()
    translations = [run_cli("mt-translate", "--checkpoint", path, input=lines) for path in (trained_run, imported_run)]
    assert translations[0].returncode == 0 and translations[0].stdout.strip()
    assert translations[1].stdout == translations[0].stdout


def test_an_opus_mt_import_exported_again_computes_the_original(corpus, tmp_path):
    source = opus_mt_directory(corpus, tmp_path / "opus")
    imported, exported = str(tmp_path / "imported"), str(tmp_path / "exported")
    assert run_cli("mt-import", "--format", "huggingface", source, imported).returncode == 0
    result = run_cli("mt-export", "--checkpoint", imported, "--format", "huggingface", exported)
    assert result.returncode == 0, result.stderr
    models = [transformers.AutoModelForSeq2SeqLM.from_pretrained(path).eval() for path in (source, exported)]
    tokenizers = [transformers.AutoTokenizer.from_pretrained(path) for path in (source, exported)]
    targets = ["Die roten Äpfel wurden verkauft.", "Tom kaufte zwanzig Hemden."]
    log_probs, generated = [], []
    for model, tokenizer in zip(models, tokenizers):
        batch = tokenizer(LINES[:2], text_target=targets, return_tensors="pt", padding=True)
        labels = batch.pop("labels")
        with torch.no_grad():
            logits = model(**batch, labels=labels).logits.log_softmax(-1)
        keep = labels != tokenizer.pad_token_id
        log_probs.append(logits.gather(2, labels[..., None])[..., 0][keep])  # each reference token's
        out = model.generate(**tokenizer(LINES, return_tensors="pt", padding=True), num_beams=2, max_new_tokens=8)
        generated.append(tokenizer.batch_decode(out, skip_special_tokens=True))
    assert (log_probs[0] - log_probs[1]).abs().max() < 1e-4
    assert generated[0] == generated[1]


@pytest.mark.slow
def test_fine_tuning_an_import_first_scores_it_then_trains_and_resumes_exactly(imported_run, corpus, tmp_path):
    import yaml

    from mt_transformer.evaluation.scores import score

    def config(name: str, steps: int) -> str:
        settings = yaml.safe_load(open(os.path.join(imported_run, "finetune.yaml"), encoding="utf-8"))
        assert settings["train"]["init_from"] == imported_run
        settings["data"] |= {"train": f"{corpus}/train", "valid": f"{corpus}/valid"}
        run = {"output_dir": str(tmp_path / name), "max_steps": steps, "valid_every": 2, "log_every": 1}
        settings["train"] |= run | {"max_tokens": 512, "precision": "fp32", "warmup": 10}
        return write_config(tmp_path / f"{name}.yaml", settings)

    result = run_cli("mt-train", "--config", config("whole", 4))
    assert result.returncode == 0, result.stderr
    first = json.loads(open(tmp_path / "whole" / "metrics.jsonl", encoding="utf-8").readline())
    assert first["step"] == 0
    # the validation before any update scores the imported model: the original's (under
    # transformers) NLL per reference token, and our greedy BLEU
    sources = open(f"{corpus}/valid.en", encoding="utf-8").read().splitlines()
    references = open(f"{corpus}/valid.de", encoding="utf-8").read().splitlines()
    original = os.path.join(os.path.dirname(imported_run), "hf")
    hf_model = transformers.AutoModelForSeq2SeqLM.from_pretrained(original).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(original)
    nll = tokens = 0
    for source, reference in zip(sources, references):
        batch = hf_tokenizer([source], text_target=[reference], return_tensors="pt")
        with torch.no_grad():
            nll += float(hf_model(**batch).loss) * batch["labels"].numel()  # the mean over its tokens
        tokens += batch["labels"].numel()
    assert first["valid_nll"] == pytest.approx(nll / tokens, abs=1e-4)
    greedy = run_cli("mt-translate", "--checkpoint", imported_run, "--beam", "1", input="\n".join(sources) + "\n")
    assert first["valid_bleu"] == pytest.approx(score(greedy.stdout.splitlines(), references, ["bleu"], "de")["bleu"])
    # stopped at update 2 and run again, it ends where the uninterrupted run ends
    assert run_cli("mt-train", "--config", config("resumed", 2)).returncode == 0
    result = run_cli("mt-train", "--config", config("resumed", 4))
    assert result.returncode == 0 and "resuming from" in result.stderr
    whole, resumed = (
        checkpoint.read_weights(tmp_path / name / "checkpoints" / "step_00000004") for name in ("whole", "resumed")
    )
    assert all(torch.equal(resumed[name], tensor) for name, tensor in whole.items())
    # its checkpoints average, and the average translates
    averaged = str(tmp_path / "averaged")
    assert (
        run_cli("mt-average", "--inputs", str(tmp_path / "whole"), "--last", "2", "--output", averaged).returncode == 0
    )
    assert run_cli("mt-translate", "--checkpoint", averaged, input=sources[0] + "\n").stdout.strip()


def _refused(result, message: str, out) -> None:
    assert result.returncode == 2 and result.stderr == f"error: {message}\n"
    assert not os.path.exists(out)


def test_an_import_is_refused_in_one_line_writing_nothing(corpus, tmp_path):
    source = opus_mt_directory(corpus, tmp_path / "opus")
    out = str(tmp_path / "out")
    (tmp_path / "opus" / "vocab.json").rename(tmp_path / "vocab.json")
    needed = "a Marian tokenizer: source.spm, target.spm, vocab.json"
    _refused(run_cli("mt-import", "--format", "huggingface", source, out), f"{source}: no vocab.json ({needed})", out)
    (tmp_path / "vocab.json").rename(tmp_path / "opus" / "vocab.json")

    settings = json.loads((tmp_path / "opus" / "config.json").read_text(encoding="utf-8"))
    (tmp_path / "opus" / "config.json").write_text(json.dumps({**settings, "add_bias_logits": True}), encoding="utf-8")
    result = run_cli("mt-import", "--format", "huggingface", source, out)
    _refused(result, "add_bias_logits: True is not modelled here (only False is)", out)

    bart = tmp_path / "bart"
    transformers.BartConfig(d_model=16, vocab_size=50).save_pretrained(str(bart))
    result = run_cli("mt-import", "--format", "huggingface", str(bart), out)
    _refused(result, "model_type: 'bart': only Marian, Pegasus and M2M100 (NLLB) models can be imported", out)


def test_a_hub_id_offline_is_refused_in_one_line(tmp_path, monkeypatch):
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # HF_HUB_OFFLINE=1, read at import
    out = str(tmp_path / "out")
    result = run_cli("mt-import", "--format", "huggingface", "Helsinki-NLP/opus-mt-xx-yy", out)
    message = "no such directory, and the Hugging Face hub cannot be reached to download it (offline?)"
    _refused(result, f"Helsinki-NLP/opus-mt-xx-yy: {message}", out)


def test_the_readme_imports_translates_and_fine_tunes(corpus, tmp_path, monkeypatch):
    """The README's three mt-import lines, run in a fresh directory with the demo data, the hub id
    replaced by an OPUS-MT-shaped model made here (no network), fine-tuning cut to 2 updates."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        lines = [line.split("  #")[0].strip() for block in f.read().split("```")[1::2] for line in block.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("mt-import "))
    commands = lines[start : start + 3]
    assert [c.split()[0] for c in commands] == ["mt-import", "mt-translate", "mt-train"]
    hub_id = commands[0].split()[3]
    source = opus_mt_directory(corpus, tmp_path / "opus")
    shutil.copytree(corpus, tmp_path / "data" / "demo")
    outputs = []
    monkeypatch.chdir(tmp_path)  # the README's relative paths
    for command in commands:
        args = command.replace(hub_id, source).split()
        if args[0] == "mt-train":
            args += ["train.max_steps=2", "train.valid_every=2", "train.max_tokens=512"]
        result = run_cli(*args)
        assert result.returncode == 0, (command, result.stderr)
        outputs.append(result.stdout)
    test_lines = (tmp_path / "data" / "demo" / "test.en").read_text(encoding="utf-8").count("\n")
    assert outputs[1].count("\n") == test_lines
    assert os.path.isdir(tmp_path / "runs" / "opus-en-de_finetuned" / "checkpoints" / "step_00000002")


def test_pickled_weights_are_read_only_when_asked_and_never_run_code(imported_run, tmp_path):
    exported = tmp_path / "hf"
    assert run_cli("mt-export", "--checkpoint", imported_run, "--format", "huggingface", str(exported)).returncode == 0
    weights = load_file(str(exported / "model.safetensors"))
    (exported / "model.safetensors").unlink()
    torch.save(weights, exported / "pytorch_model.bin")
    out = str(tmp_path / "out")
    result = run_cli("mt-import", "--format", "huggingface", str(exported), out)
    assert result.returncode == 2 and "its weights are pickled" in result.stderr and "--allow-pickle" in result.stderr
    assert len(result.stderr.splitlines()) == 1 and not os.path.exists(out)
    result = run_cli("mt-import", "--format", "huggingface", str(exported), out, "--allow-pickle")
    assert result.returncode == 0, result.stderr
    expected, found = (
        checkpoint.load(imported_run, CPU).model.state_dict(),
        checkpoint.load(out, CPU).model.state_dict(),
    )
    assert all(torch.equal(found[name], tensor) for name, tensor in expected.items())
    # a payload in the pickle: weights_only refuses it in one line and it never runs
    marker = tmp_path / "payload-ran"
    torch.save({**weights, "payload": Payload(marker)}, exported / "pytorch_model.bin")
    again = str(tmp_path / "again")
    result = run_cli("mt-import", "--format", "huggingface", str(exported), again, "--allow-pickle")
    assert result.returncode == 2 and "weights cannot be read (refused: the pickle holds" in result.stderr
    assert "Traceback" not in result.stderr and not marker.exists() and not os.path.exists(again)
    result = run_cli("mt-import", "--format", "huggingface", str(exported), again, "--revision", "main")
    assert result.returncode == 2 and "--revision: for a hub id" in result.stderr
