import json

import datasets
import pytest

from conftest import read_split, run_cli, tiny_config, write_config
from mt_transformer.data.corpus import ColumnLines, drop_empty
from mt_transformer.errors import UserError


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_text_files_are_normalized(tmp_path):
    write(tmp_path / "train.de", "\ufeffEin Haus\r\n  Zwei  \n\nKa\u0308se\n")
    write(tmp_path / "train.en", "A house\r\nTwo\nempty\ncheese\n")
    pairs = read_split("text", str(tmp_path / "train"), "de", "en", "data.train")
    assert pairs["src"][:] == ["Ein Haus", "Zwei", "", "K\u00e4se"]  # BOM/CRLF/space stripped, NFC
    assert pairs["tgt"][:] == ["A house", "Two", "empty", "cheese"]
    kept, dropped = drop_empty(pairs)
    assert dropped == 1 and len(kept) == 3


def test_a_line_ends_at_a_newline_only_as_every_command_reads_it(tmp_path):
    """A lone carriage return inside a line (one side at line 11, the other at line 21) is white
    space, as mt-translate and mt-eval read it: no pair moves (they did, when the training loader
    took it for a line end on both sides and the counts still matched)."""
    from mt_transformer.data.text import normalize, read_lines

    src = [f"Satz {i} hier" for i in range(30)]
    tgt = [f"sentence {i} here" for i in range(30)]
    src[10], tgt[20] = "Satz 10\rhier", "sentence 20\rhere"
    write(tmp_path / "train.de", "\n".join(src) + "\n")
    write(tmp_path / "train.en", "\r\n".join(tgt) + "\r\n")  # CRLF endings are line ends
    pairs = read_split("text", str(tmp_path / "train"), "de", "en", "data.train")
    assert len(pairs) == 30 and all(s.split()[1] == t.split()[1] for s, t in zip(pairs["src"], pairs["tgt"]))
    assert pairs["src"][10] == "Satz 10 hier" and pairs["tgt"][20] == "sentence 20 here"
    assert [normalize(line) for line in read_lines(str(tmp_path / "train.de"))] == pairs["src"][:]


def test_line_count_mismatch_names_both_files(tmp_path):
    write(tmp_path / "t.de", "a\nb\n")
    write(tmp_path / "t.en", "a\n")
    with pytest.raises(UserError, match=r"data.train: .*t.de has 2 lines but .*t.en has 1"):
        read_split("text", str(tmp_path / "t"), "de", "en", "data.train")


def test_tsv(tmp_path):
    path = write(tmp_path / "pairs.tsv", "Hallo\tHello\nJa\tYes\n")
    pairs = read_split("tsv", path, "de", "en", "data.train")
    assert pairs["src"][:] == ["Hallo", "Ja"] and pairs["tgt"][:] == ["Hello", "Yes"]
    bad = write(tmp_path / "bad.tsv", "Hallo\tHello\nkein tab\n")
    with pytest.raises(UserError, match="bad.tsv: line 2 has 1 tab-separated fields"):
        read_split("tsv", bad, "de", "en", "data.train")


def test_jsonl_translation_rows_and_named_columns(tmp_path):
    rows = [{"translation": {"de": "Hallo", "en": "Hello"}}, {"translation": {"de": "Ja", "en": "Yes"}}]
    path = write(tmp_path / "t.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    pairs = read_split("jsonl", path, "de", "en", "data.train")
    assert pairs["src"][:] == ["Hallo", "Ja"] and pairs["tgt"][:] == ["Hello", "Yes"]
    reverse = read_split("jsonl", path, "en", "de", "data.train")
    assert reverse["src"][:] == ["Hello", "Yes"]
    named = write(tmp_path / "n.jsonl", json.dumps({"german": "Haus", "english": "house"}) + "\n")
    pairs = read_split("jsonl", named, "de", "en", "data.train", src_column="german", tgt_column="english")
    assert pairs["src"][:] == ["Haus"] and pairs["tgt"][:] == ["house"]
    with pytest.raises(UserError, match="no column 'de'"):
        read_split("jsonl", named, "de", "en", "data.train")
    swapped = write(tmp_path / "s.jsonl", json.dumps({"src": "Quelle", "tgt": "target"}) + "\n")
    pairs = read_split("jsonl", swapped, "de", "en", "data.train", src_column="tgt", tgt_column="src")
    assert pairs["src"][:] == ["target"] and pairs["tgt"][:] == ["Quelle"]


def test_hub_shaped_dataset_with_configs_and_splits(tmp_path):
    """A local dataset laid out like the hub's wmt14: one config per pair, parquet splits,
    rows {"translation": {"de": .., "en": ..}}, loaded through the same hub code path."""
    repo = tmp_path / "wmt_like"
    (repo / "de-en").mkdir(parents=True)
    for split, n in (("train", 3), ("validation", 2)):
        rows = {"translation": [{"de": f"Satz {i}", "en": f"Sentence {i}"} for i in range(n)]}
        datasets.Dataset.from_dict(rows).to_parquet(str(repo / "de-en" / f"{split}-00000-of-00001.parquet"))
    (repo / "README.md").write_text(
        "---\nconfigs:\n- config_name: de-en\n  data_files:\n"
        "  - split: train\n    path: de-en/train-*\n  - split: validation\n    path: de-en/validation-*\n---\n"
    )
    pairs = read_split("hub", "validation", "en", "de", "data.valid", hub_name=str(repo), hub_config="de-en")
    assert pairs["src"][:] == ["Sentence 0", "Sentence 1"] and pairs["tgt"][:] == ["Satz 0", "Satz 1"]
    assert len(read_split("hub", "train", "de", "en", "data.train", hub_name=str(repo), hub_config="de-en")) == 3
    # the copy changed in place (or another copy of the same name elsewhere) is read anew, not from datasets' cache
    rows = {"translation": [{"de": f"Satz {i}", "en": f"Sentence {i}"} for i in range(4)]}
    datasets.Dataset.from_dict(rows).to_parquet(str(repo / "de-en" / "train-00000-of-00001.parquet"))
    assert len(read_split("hub", "train", "de", "en", "data.train", hub_name=str(repo), hub_config="de-en")) == 4
    with pytest.raises(UserError, match=r"^data: .*wmt_like: Unknown split .test"):
        read_split("hub", "test", "de", "en", "data.test", hub_name=str(repo), hub_config="de-en")


def test_invalid_utf8_is_a_user_error(tmp_path):
    (tmp_path / "x.de").write_bytes(b"gut\n\xff\xfe kaputt\n")
    write(tmp_path / "x.en", "good\nbroken\n")
    with pytest.raises(UserError, match="x.de: line 2 is not valid UTF-8"):
        read_split("text", str(tmp_path / "x"), "de", "en", "data.train")


@pytest.mark.parametrize(
    "format, files",
    [
        ("text", {"t.de": "", "t.en": ""}),
        ("tsv", {"t.tsv": ""}),
        ("jsonl", {"t.jsonl": ""}),
    ],
)
def test_an_empty_file_is_a_user_error_naming_it(tmp_path, format, files):
    for name, text in files.items():
        write(tmp_path / name, text)
    location = str(tmp_path / ("t" if format == "text" else next(iter(files))))
    with pytest.raises(UserError) as error:
        read_split(format, location, "de", "en", "data.valid")
    assert str(error.value) == f"data.valid: {tmp_path / next(iter(files))} is empty"


def test_a_training_set_without_a_single_complete_pair_is_a_user_error(tmp_path):
    write(tmp_path / "t.de", "eins\n\n \n")
    write(tmp_path / "t.en", "\ntwo\n\n")
    config = tiny_config(
        str(tmp_path),
        str(tmp_path / "run"),
        data={"train": str(tmp_path / "t"), "valid": None, "src_lang": "de", "tgt_lang": "en"},
    )
    result = run_cli("mt-train", "--config", write_config(tmp_path / "c.yaml", config))
    assert result.returncode == 2
    assert (
        result.stderr.strip().splitlines()[-1] == f"error: data.train: {tmp_path / 't'}: no pair has text on both sides"
    )


def test_column_lines_read_a_filtered_column_in_order_across_batches_and_again(monkeypatch):
    monkeypatch.setattr(ColumnLines, "BATCH", 3)
    dataset = datasets.Dataset.from_dict({"src": [f"s{i}" for i in range(10)], "tgt": ["", "t"] * 5})
    kept, dropped = drop_empty(dataset)  # every other row: an indices mapping over the table
    lines = ColumnLines(kept, "src")
    assert dropped == 5 and len(lines) == 5
    assert list(lines) == list(lines) == ["s1", "s3", "s5", "s7", "s9"]
