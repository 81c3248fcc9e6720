"""scripts/memory_scaling.py: mt-prepare and mt-train time and peak memory as the corpus grows."""

import pytest

import memory_scaling


@pytest.mark.slow  # about 15 s: one corpus prepared and trained, each in a process of its own (a second
# size runs the same code and costs two more processes)
def test_a_size_is_prepared_and_trained_and_tabled(tmp_path, capsys):
    small = ["model.d_model=32", "model.d_ff=64", "model.encoder_layers=1", "model.decoder_layers=1"]
    small += ["train.valid_max_sentences=5", "train.max_tokens=1024", "train.curves=false", "data.clean={}"]
    args = ["--sizes", "3000", "--steps", "2", "--workdir", str(tmp_path), "--set", *small]
    rows = memory_scaling.main(args)
    assert [r[0] for r in rows] == [3000]
    for _, text_mb, prep_s, rate, prep_rss, disk_mb, train_s, train_rss in rows:
        assert text_mb > 0 and prep_s > 0 and rate > 0 and prep_rss > 0 and disk_mb > 0 and train_s > 0
        assert train_rss > 50  # torch alone
    printed = capsys.readouterr().out
    assert "| 3,000 |" in printed and "training peak RSS, 3,000 pairs over 3,000: 1.00" in printed
