"""scripts/peer_bench.py: mt_transformer trained and decoded as the peers' benchmark does."""

import json
import os
import shutil

import pytest

import peer_bench


def test_it_asks_for_the_peers_data_first(tmp_path):
    with pytest.raises(SystemExit, match="prepare_data.sh"):
        peer_bench.main(["--peers-dir", str(tmp_path)])


@pytest.mark.slow  # about 15 s: a few updates of a small model, then beam 4 at two batch sizes
def test_a_run_on_the_peers_data_writes_its_result(corpus, tmp_path):
    raw = tmp_path / "data" / "raw"
    os.makedirs(raw)
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            shutil.copy(f"{corpus}/{split}.{lang}", raw / f"{split}.{lang}")
    small = ["data.vocab_size=200", "model.d_model=32", "model.d_ff=64", "train.log_every=1", "decode.max_len_b=10"]
    small += ["model.encoder_layers=1", "model.decoder_layers=1", "train.max_tokens=1024"]
    small += ["train.valid_max_sentences=5", "train.curves=false", "data.clean={}"]
    result = peer_bench.main(["--peers-dir", str(tmp_path), "--steps", "3", "--set", *small])
    assert result["train_wall_s"] > 0 and result["train_peak_rss_mb"] > 0 and result["train_tok_per_s"] > 0
    for batch in ("2048", "8192"):
        assert result[f"decode_sent_per_s@{batch}/round1"] > 0 and 0 <= result[f"bleu@{batch}"] <= 100
    saved = tmp_path / "runs" / "mt_transformer-r1" / "result.json"
    assert json.loads(saved.read_text()) == result and result["machine"]
