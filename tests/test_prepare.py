import os

from mt_transformer.corpus import load_pairs
from mt_transformer.prepare import cache_key, encode_split
from mt_transformer.tokenizer import train_tokenizer


def test_encoding_is_cached_and_filters_training_data(tmp_path):
    (tmp_path / "t.de").write_text("ein kurzer Satz\n" * 50 + "kurz\n" + ("lang " * 80) + "\n\n", encoding="utf-8")
    (tmp_path / "t.en").write_text("a short sentence\n" * 50 + ("long " * 40) + "\nshort\nnot empty\n", encoding="utf-8")
    tokenizer = train_tokenizer(str(tmp_path), ["ein kurzer Satz lang kurz"] * 20, ["a short sentence long"] * 20,
                                True, 30, "bpe", 1.0, 100, seed=1)
    model = os.path.join(str(tmp_path), tokenizer.files[0])
    calls = []

    def load():
        calls.append(1)
        return load_pairs("text", str(tmp_path / "t"), "de", "en", "data.train")

    key = cache_key({"x": 1}, [str(tmp_path / "t.de"), str(tmp_path / "t.en")], [model], {"max_len": 20})
    first, stats = encode_split(load, str(tmp_path / "cache"), key, model, model, True, 20, 3.0, 1)
    assert stats == {"pairs": 53, "empty": 1, "too_long": 1, "bad_ratio": 0, "kept": 51, "cached": False}
    second, stats = encode_split(load, str(tmp_path / "cache"), key, model, model, True, 20, 3.0, 1)
    assert stats["cached"] and len(calls) == 1
    assert first["src_ids"][:] == second["src_ids"][:]
    assert all(n <= 20 for n in second["src_len"])
    # changing the data changes the key
    (tmp_path / "t.en").write_text("changed\n" * 53, encoding="utf-8")
    assert cache_key({"x": 1}, [str(tmp_path / "t.de"), str(tmp_path / "t.en")], [model], {"max_len": 20}) != key
