"""scripts/serve_bench.py: a real mt-serve on 127.0.0.1 under concurrent clients, bounded."""

import json

import pytest

import serve_bench


@pytest.mark.slow  # about 15 s: a server started twice
def test_every_client_count_and_request_size_is_a_row_with_and_without_batching(trained_run, corpus, tmp_path):
    out = tmp_path / "serve.json"
    args = ["--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--clients", "1", "2"]
    limits = ["--lines-per-request", "1", "4", "--max-lines", "16", "--seconds", "10", "--rounds", "2"]
    rows = serve_bench.main([*args, *limits, "--compare-unbatched", "--json", str(out)])
    assert [(r["batching"], r["lines_per_request"], r["clients"]) for r in rows] == [
        (batching, size, clients) for batching in (True, False) for size in (1, 4) for clients in (1, 2)
    ]
    for r in rows:
        assert r["failures"] == 0 and r["requests"] >= 2 and r["sentences_per_s"] > 0 and r["peak_rss_mb"] > 0
        assert r["p50_ms"] <= r["p99_ms"]
    saved = json.loads(out.read_text())
    assert saved["cpu"] and saved["offline_sentences_per_s"] > 0 and len(saved["rows"]) == 8


@pytest.mark.slow  # about 8 s: a server under 4 clients for 2 s
def test_the_soak_mixes_every_kind_and_reports_latency_codes_and_memory(trained_run, corpus, tmp_path):
    import serve_soak

    out = tmp_path / "soak.json"
    args = ["--checkpoint", trained_run, "--src", f"{corpus}/valid.en", "--clients", "4", "--seconds", "2"]
    summary = serve_soak.main([*args, "--requests", "40", "--long", "html", "--json", str(out)])
    assert set(summary["kinds"]) == {*serve_soak.KINDS, "long html"}
    refused = summary["kinds"]["long html"]["requests"]  # 413: past the sentences and elements allowed
    assert summary["statuses"] == {200: sum(k["requests"] for k in summary["kinds"].values()) - refused, 413: refused}
    assert all(0 < k["p50_ms"] <= k["p99_ms"] for k in summary["kinds"].values())
    assert 0 < summary["rss_mb"]["start"] <= summary["rss_mb"]["peak"]
    assert json.loads(out.read_text())["cpu"]
