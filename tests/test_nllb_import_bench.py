"""scripts/nllb_import_bench.py: an NLLB-shaped random model imported whole and trimmed, each
import's time and peak memory, and the two models' speed."""

import pytest

pytest.importorskip("transformers")
import nllb_import_bench  # noqa: E402


@pytest.mark.slow  # about 15 s: two imports and two translation processes
def test_a_tiny_nllb_shaped_model_is_imported_trimmed_and_timed(corpus, tmp_path, capsys):
    text = [f"{corpus}/test.en", f"{corpus}/test.de"]
    results = nllb_import_bench.main(
        ["--text", *text, "--size", "tiny", "--lines", "10", "--rounds", "1", "--json", str(tmp_path / "r.json")]
    )
    full, trimmed = results["full"], results["trimmed"]
    assert trimmed["pieces"] < full["pieces"] == nllb_import_bench.SHAPES["tiny"]["rows"] + 1  # and our start id
    assert trimmed["checkpoint_mib"] < full["checkpoint_mib"]
    for r in (full, trimmed):
        assert r["import_s"] > 0 and r["peak_rss_mib"] >= r["own_mib"] > 50 and r["sent_per_s"] > 0
    assert "| trimmed |" in capsys.readouterr().out and (tmp_path / "r.json").is_file()
