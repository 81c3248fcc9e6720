import json
import logging
import os

import numpy as np
import pytest

from conftest import read_split, tiny_config, write_config
from mt_transformer.config import CorpusConfig, load_config
from mt_transformer.data.cache import cache_key, split_source
from mt_transformer.data.from_text import VOCAB_RANGE
from mt_transformer.data.prepare import encode_split, prepare_data
from mt_transformer.data.run_tokenizer import chosen_vocab_size
from mt_transformer.data.sentencepiece_training import train_tokenizer
from mt_transformer.errors import UserError


def test_encoding_is_cached_and_filters_training_data(tmp_path):
    pairs = [("ein kurzer Satz", "a short sentence")] * 50 + [
        ("lang " * 80, "short"),  # too long
        ("kurz", "a short sentence a short sentence"),  # length ratio over 3
        ("", "not empty"),  # empty side
    ]
    (tmp_path / "t.de").write_text("".join(de + "\n" for de, _ in pairs), encoding="utf-8")
    (tmp_path / "t.en").write_text("".join(en + "\n" for _, en in pairs), encoding="utf-8")
    tokenizer = train_tokenizer(
        str(tmp_path),
        ["ein kurzer Satz lang kurz"] * 20,
        ["a short sentence long"] * 20,
        True,
        30,
        "bpe",
        1.0,
        100,
        seed=1,
        byte_fallback=False,
    )
    model = os.path.join(str(tmp_path), tokenizer.files[0])
    calls = []

    def load():
        calls.append(1)
        return read_split("text", str(tmp_path / "t"), "de", "en", "data.train")

    key = cache_key({"x": 1}, [str(tmp_path / "t.de"), str(tmp_path / "t.en")], [model], {"max_len": 40})
    first, stats = encode_split(load, str(tmp_path / "cache"), key, str(tmp_path), True, 40, 3.0, 1)
    assert stats == {"pairs": 53, "empty": 1, "too_long": 1, "bad_ratio": 1, "kept": 50, "cached": False}
    second, stats = encode_split(load, str(tmp_path / "cache"), key, str(tmp_path), True, 40, 3.0, 1)
    assert stats["cached"] and len(calls) == 1
    assert first["src_ids"][:] == second["src_ids"][:]
    assert all(n <= 40 for n in second["src_len"])
    # changing the data changes the key
    (tmp_path / "t.en").write_text("changed\n" * 53, encoding="utf-8")
    assert cache_key({"x": 1}, [str(tmp_path / "t.de"), str(tmp_path / "t.en")], [model], {"max_len": 40}) != key


def test_a_splits_identity_holds_only_the_keys_its_format_reads():
    # local text under a recipe written for the hub (its hub_name left set) is the same corpus as
    # that text given in data.corpora: one cached encoding, one cached teacher translation
    text = CorpusConfig(src_lang="de", tgt_lang="en", format="text", train="corpus/train")
    assert split_source(text, "train") == split_source(
        CorpusConfig(src_lang="de", tgt_lang="en", format="text", train="corpus/train", hub_name="x/y", src_column="a"),
        "train",
    )
    assert split_source(text, "train") != split_source(
        CorpusConfig(src_lang="de", tgt_lang="en", format="text", train="other/train"), "train"
    )
    assert split_source(text, "train") != split_source(
        CorpusConfig(src_lang="en", tgt_lang="de", format="text", train="corpus/train"), "train"
    )
    rows = CorpusConfig(src_lang="de", tgt_lang="en", format="jsonl", train="rows.jsonl")
    assert split_source(rows, "train") != split_source(
        CorpusConfig(src_lang="de", tgt_lang="en", format="jsonl", train="rows.jsonl", src_column="a"), "train"
    )
    hub = CorpusConfig(src_lang="de", tgt_lang="en", format="hub", train="train", hub_name="a/b")
    assert split_source(hub, "train") != split_source(
        CorpusConfig(src_lang="de", tgt_lang="en", format="hub", train="train", hub_name="a/c"), "train"
    )


def test_encoding_in_two_processes_matches_one(tmp_path):
    lines = [f"Satz Nummer {i} ist hier" for i in range(400)]
    (tmp_path / "p.de").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (tmp_path / "p.en").write_text("\n".join(s.replace("Satz", "sentence") for s in lines) + "\n", encoding="utf-8")
    train_tokenizer(str(tmp_path), lines, lines, True, 40, "bpe", 1.0, 1000, seed=1, byte_fallback=False)

    def load():
        return read_split("text", str(tmp_path / "p"), "de", "en", "data.train")

    one, _ = encode_split(load, str(tmp_path / "c1"), "k", str(tmp_path), True, 64, 3.0, num_proc=1)
    two, _ = encode_split(load, str(tmp_path / "c2"), "k", str(tmp_path), True, 64, 3.0, num_proc=2)
    assert one["src_ids"][:] == two["src_ids"][:] and one["tgt_ids"][:] == two["tgt_ids"][:]


def test_a_line_of_100000_characters_is_dropped_from_training_and_counted(corpus, tmp_path, caplog):
    for side in ("en", "de"):
        lines = open(f"{corpus}/train.{side}", encoding="utf-8").read().splitlines()[:300]
        lines.insert(100, " ".join(["Wort"] * 20000) if side == "de" else "word" * 25000)
        (tmp_path / f"train.{side}").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tiny_config(corpus, str(tmp_path / "run"), data={"train": str(tmp_path / "train"), "valid": None})
    data = load_config(write_config(tmp_path / "c.yaml", config)).data
    with caplog.at_level(logging.INFO, logger="mt_transformer"):
        tokenizer, encoded, _ = prepare_data(data, str(tmp_path / "run"), seed=1)
    assert len(encoded["train"]) == 300
    assert "train: 300 pairs (encoded), dropped 0 empty, 1 longer than 48 subwords" in caplog.text
    assert tokenizer.src_vocab_size == 200


def test_a_run_keeps_its_tokenizer_settings(corpus, tmp_path):
    run = str(tmp_path / "run")

    def data(**changes):
        config = tiny_config(corpus, run, data={"valid": None, "character_coverage": 1.0, **changes})
        return load_config(write_config(tmp_path / "c.yaml", config)).data

    prepare_data(data(), run, seed=1)
    with pytest.raises(UserError, match=r"data.vocab_size: 180 differs from the tokenizer already in .*\(200\)"):
        prepare_data(data(vocab_size=180), run, seed=1)
    with pytest.raises(UserError, match=r"data.character_coverage: 0.9995 differs"):
        prepare_data(data(character_coverage=0.9995), run, seed=1)
    tokenizer, _, _ = prepare_data(data(character_coverage=0), run, seed=1)  # auto takes the run's choice
    assert tokenizer.src_vocab_size == 200
    tags_differ = r"data.target_tags/tag \(source tags\): \['<2de>'\] differs from the tokenizer already in .*\(\[\]\)"
    with pytest.raises(UserError, match=tags_differ):
        prepare_data(data(target_tags=True), run, seed=1)
    with pytest.raises(UserError, match=r"data.byte_fallback: True differs from the tokenizer already in .*\(False\)"):
        prepare_data(data(byte_fallback=True), run, seed=1)
    with pytest.raises(UserError, match=r"data.fold_source_case: True differs from the tokenizer already in .*"):
        prepare_data(data(fold_source_case=True), run, seed=1)
    # a tokenizer whose settings predate byte pieces and folding has neither
    settings = os.path.join(run, "tokenizer.json")
    with open(settings, encoding="utf-8") as f:
        saved = json.load(f)
    del saved["byte_fallback"], saved["fold_source_case"]
    with open(settings, "w", encoding="utf-8") as f:
        json.dump(saved, f)
    assert prepare_data(data(), run, seed=1)[0].src_vocab_size == 200


@pytest.mark.parametrize("model_type", ["unigram", "bpe"])
def test_subword_regularization_draws_segmentations_of_the_same_text(corpus, tmp_path, model_type):
    import sentencepiece

    from mt_transformer.data.prepare import SubwordEncoder
    from mt_transformer.data.sentencepiece_training import train_sentencepiece

    model = str(tmp_path / "spm.model")
    lines = open(f"{corpus}/train.en", encoding="utf-8").read().splitlines()
    train_sentencepiece(lines, model, 150, model_type, 1.0, 10_000, seed=1, byte_fallback=False)
    text = {"src": ["The red apples were sold on March fifth."], "tgt": ["Tom bought twenty green shirts."]}
    fixed = SubwordEncoder(str(tmp_path))(text)
    assert all(SubwordEncoder(str(tmp_path))(text) == fixed for _ in range(3))  # no alpha: one way
    drawn = [SubwordEncoder(str(tmp_path), alpha=0.3)(text) for _ in range(20)]
    assert any(d["src_ids"] != fixed["src_ids"] for d in drawn)  # alpha: several ways
    # each call draws anew, also where the generator was seeded (train_sentencepiece seeds it)
    assert len({str(d["src_ids"]) for d in drawn}) > 1 and len({str(d["tgt_ids"]) for d in drawn}) > 1
    processor = sentencepiece.SentencePieceProcessor(model_file=model)
    assert {processor.decode(d["tgt_ids"][0]) for d in drawn} == {text["tgt"][0]}  # of the same text


def test_subword_regularization_fills_batches_within_max_tokens_by_the_drawn_lengths(corpus, tmp_path, monkeypatch):
    from mt_transformer.data import batching, prepare
    from mt_transformer.training import train as train_module

    real_call, real_collate = prepare.SubwordEncoder.__call__, batching.collate
    drawn, sizes = [], []

    def drawing_longer(self, batch, seed=None):  # the real draw, its targets twice as long
        result = real_call(self, batch, seed)
        if self.alpha > 0:
            result["tgt_ids"] = [ids * 2 for ids in result["tgt_ids"]]
            drawn.append(seed)
        return result

    def measured_collate(src_ids, tgt_ids, tag_after_eos=False):
        batch = real_collate(src_ids, tgt_ids, tag_after_eos)
        sizes.append(max(batch.src.numel(), batch.tgt_in.numel()))
        return batch

    monkeypatch.setattr(prepare.SubwordEncoder, "__call__", drawing_longer)
    monkeypatch.setattr(batching, "collate", measured_collate)
    out = tmp_path / "run"
    config = tiny_config(corpus, str(out), train={"max_steps": 30, "valid_every": 30, "max_tokens": 2048})
    config["data"].update(spm_alpha=0.2, max_len=200)  # max_len would take back the doubled targets
    train_module.train(load_config(write_config(tmp_path / "c.yaml", config)))
    assert drawn  # the epoch's pairs, drawn before its batches were cut
    assert len(sizes) >= 30 and max(sizes) <= 2048  # train.max_tokens holds for the drawn segmentations
    assert np.median(sizes) > 0.9 * 2048  # and batches are cut by the drawn lengths: full
    assert (out / "checkpoints" / "step_00000030" / "model.safetensors").exists()


def test_a_vocabulary_sized_from_the_data_is_recorded_and_kept(corpus, tmp_path, caplog):
    run = str(tmp_path / "run")

    def data(**changes):
        config = tiny_config(corpus, run, data={"valid": None, "vocab_size": 0, **changes})
        return load_config(write_config(tmp_path / "c.yaml", config)).data

    with caplog.at_level(logging.INFO, logger="mt_transformer"):
        tokenizer, _, _ = prepare_data(data(), run, seed=1)
    chosen = chosen_vocab_size(run)
    assert f"data.vocab_size: {chosen} (sized from the data: " in caplog.text
    # the tiny corpus has too few words for the smallest size: sentencepiece makes what it can
    assert chosen == VOCAB_RANGE[0] and 16 < tokenizer.src_vocab_size <= chosen
    assert prepare_data(data(), run, seed=1)[0].src_vocab_size == tokenizer.src_vocab_size
    assert prepare_data(data(vocab_size=chosen), run, seed=1)[0].src_vocab_size == tokenizer.src_vocab_size
    with pytest.raises(UserError, match=rf"data.vocab_size: 300 differs from the tokenizer already in .*\({chosen}\)"):
        prepare_data(data(vocab_size=300), run, seed=1)
