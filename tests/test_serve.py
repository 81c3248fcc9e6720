"""mt-serve as a user starts it: one-line errors, a real process on 127.0.0.1 that drains its
requests on SIGTERM, and the page in a headless Chromium."""

import json
import os
import re
import sys
import threading
import time

import pytest

from conftest import ROOT, run_cli, translator
from mt_transformer.exchange.engine_choice import open_translator
from serve_page import chromium, open_browser, try_page
from serve_process import ServerProcess, get, post


def test_without_the_serve_extra_a_one_line_error(monkeypatch, trained_run):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # import uvicorn now raises ImportError
    result = run_cli("mt-serve", "--checkpoint", trained_run)
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: mt-serve needs the serve extra: pip install 'mt_transformer[serve]' (uvicorn is missing)"
    )


@pytest.mark.parametrize(
    "extra, says",
    [
        (["--checkpoint", "no/such/run"], "--checkpoint: no/such/run: no such file or directory"),
        (["--api-keys", "no/such/keys.txt"], "--api-keys: no/such/keys.txt: No such file or directory"),
        (["--max-lines", "0"], "--max-lines: must be at least 1, got 0"),
        (["--timeout", "-1"], "--timeout: must be 0 or more, got -1.0"),
    ],
)
def test_mistakes_are_one_line_errors(trained_run, extra, says):
    result = run_cli("mt-serve", "--checkpoint", trained_run, *extra)
    assert result.returncode == 2 and result.stderr.strip() == f"error: {says}", result.stderr


def readme_requests() -> list[dict]:
    """The JSON bodies of the README's `curl ... /translate` commands."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    bodies = [json.loads(body) for body in re.findall(r"/translate [^\n]*\n[^\n]*-d '(\{.*?\})'", text)]
    assert bodies, "the README shows no curl command for /translate"
    return bodies


@pytest.mark.slow  # about 6 s: a process start and a failed one
def test_a_real_server_answers_drains_on_sigterm_and_exits_0(trained_run, tmp_path):
    lines = [f"the dog {n} a red house" for n in range(400)]
    offline = [t[0].text for t in open_translator(trained_run, "auto", "cpu")(lines)]
    with ServerProcess(["--checkpoint", trained_run]) as server:
        status, health = get(server.url + "/health")
        assert status == 200 and health["status"] == "ok"
        assert health["engines"]["en-de"].startswith("CTranslate2 on cpu, float32")  # --engine auto
        for body in readme_requests():  # the README's curl commands, as a user pastes them
            status, answer = post(server.url + "/translate", body)
            assert status == 200 and list(answer) == ["translatedText"] and answer["translatedText"]
        answers = []
        sender = threading.Thread(
            target=lambda: answers.append(post(server.url + "/translate", {"q": lines, "source": "en", "target": "de"}))
        )
        sender.start()
        time.sleep(0.3)  # the request is in flight
        began = time.monotonic()
        assert server.stop() == 0
        stopped_in = time.monotonic() - began
        sender.join()
    assert answers == [(200, {"translatedText": offline})]
    assert stopped_in < 30
    logged = [line for line in server.stderr.splitlines() if line.startswith("{")]
    paths = [json.loads(line)["path"] for line in logged]  # /ready as often as the start-up asked
    translations = ["/translate"] * (len(readme_requests()) + 1)
    assert paths[-len(translations) - 1 :] == ["/health"] + translations
    assert set(paths[: -len(translations) - 1]) == {"/ready"}
    assert "Traceback" not in server.stderr
    with pytest.raises(OSError):  # nothing listens any more
        get(server.url + "/health", timeout=2)

    empty = tmp_path / "not_a_run"
    empty.mkdir()
    with pytest.raises(RuntimeError, match="(?s)ended with 2: .*\nerror: .*no checkpoint found"):
        ServerProcess(["--checkpoint", str(empty)]).__enter__()


@pytest.mark.browser
@pytest.mark.slow  # about 8 s: a server and a browser start
@pytest.mark.skipif(
    chromium() is None, reason="needs chromium and chromedriver (apt-get install chromium chromium-driver)"
)
def test_the_page_translates_and_draws_every_kind_layer_and_head_in_a_real_browser(trained_run, tmp_path):
    screenshot = os.environ.get("MT_SERVE_SCREENSHOT") or str(tmp_path / "page.png")
    text = "a red house"
    with ServerProcess(["--checkpoint", trained_run]) as server:
        request = {"q": text, "source": "en", "target": "de"}
        expected = post(server.url + "/translate", request)[1]
        answer = post(server.url + "/v1/translate", {**request, "alignment": True, "attention": True})[1]
        aligned, attention = answer["translations"][0]["hypotheses"][0], answer["translations"][0]["attention"]
        driver = open_browser()
        try:
            plain = try_page(driver, server.url + "/", text)
            shown = try_page(driver, server.url + "/", text, attention=True, screenshot=screenshot)
            encoder = try_page(driver, server.url + "/", text, view=("encoder", 2, "2"))
            decoder = try_page(driver, server.url + "/", text, view=("decoder", 1, "mean"))
            cross = try_page(driver, server.url + "/", text, view=("cross", 2, "4"))
        finally:
            driver.quit()
    assert plain["translation"] == expected["translatedText"] and plain["heatmap_rows"] == 0
    assert shown["translation"] == expected["translatedText"]
    assert shown["alignment"] == "alignment (source-target words): " + aligned["alignment"]
    assert shown["heatmap_rows"] == len(translator(trained_run)([text])[0][0].tokens) + 1  # and EOS
    with open(screenshot, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # any kind, layer and head: the cells the API gives (layer 2, head 2 of the encoder, ...)
    assert encoder["rows"] == encoder["columns"] == attention["source_pieces"]
    assert encoder["weights"] == attention["layers"]["encoder"][1][1]
    assert decoder["rows"] == attention["target_pieces"] and decoder["columns"] == attention["decoder_pieces"]
    heads = attention["layers"]["decoder"][0]
    mean = [[sum(h[q][k] for h in heads) / len(heads) for k in range(len(heads[0][0]))] for q in range(len(heads[0]))]
    assert [w for row in decoder["weights"] for w in row] == pytest.approx([w for row in mean for w in row], abs=1e-3)
    assert all(w == 0 for q, row in enumerate(decoder["weights"]) for w in row[q + 1 :])  # causal
    assert cross["rows"] == attention["target_pieces"] and cross["weights"] == attention["layers"]["cross"][1][3]
