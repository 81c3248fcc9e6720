"""mt-serve as a user starts it: one-line errors, a real process on 127.0.0.1 that drains its
requests on SIGTERM, and the page in a headless Chromium."""

import json
import os
import re
import select
import socket
import sys
import threading
import time

import pytest
from test_markup_html import Tags

from conftest import ROOT, run_cli, translator
from mt_transformer.decoding.engines import open_translator
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
        (["--max-lines", "0"], "argument --max-lines: must be at least 1, not 0 (mt-serve --help lists the options)"),
        (["--timeout", "-1"], "argument --timeout: must be 0 or more, not -1 (mt-serve --help lists the options)"),
        (
            ["--req-limit", "x"],
            "argument --req-limit: must be a whole number, not 'x' (mt-serve --help lists the options)",
        ),
    ],
)
def test_mistakes_are_one_line_errors(trained_run, extra, says):
    result = run_cli("mt-serve", "--checkpoint", trained_run, *extra)
    assert result.returncode == 2 and result.stderr.strip() == f"error: {says}", result.stderr


def test_a_port_in_use_is_a_one_line_error(trained_run):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("mt-serve", "--checkpoint", trained_run, "--host", "127.0.0.1", "--port", str(port))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: --host/--port: cannot listen on 127.0.0.1:{port} (Address already in use)"


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
        fragment = 'the <b>dog</b> <a href="/x?a=1&amp;b=2">a red house</a>'  # inline elements come back
        html = {"q": fragment, "source": "en", "target": "de", "format": "html"}
        status, answer = post(server.url + "/translate", html)
        assert status == 200 and Tags(answer["translatedText"]).tags == Tags(fragment).tags
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
    translations = ["/translate"] * (len(readme_requests()) + 2)  # and the html fragment
    assert paths[-len(translations) - 1 :] == ["/health"] + translations
    assert set(paths[: -len(translations) - 1]) == {"/ready"}
    assert "Traceback" not in server.stderr
    with pytest.raises(OSError):  # nothing listens any more
        get(server.url + "/health", timeout=2)

    empty = tmp_path / "not_a_run"
    empty.mkdir()
    # refused in one line before the server starts
    with pytest.raises(RuntimeError, match="ended with 2: error: --checkpoint: .*not_a_run: no checkpoint found"):
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


# In the server process: a decoder step of a batch of more than 100 rows takes 0.2 s, so that a
# request of 1,000 lines runs for many seconds while one of a few lines stays quick.
SLOW_BIG_BATCHES = """
import time
from mt_transformer.model.transformer import Transformer
decode = Transformer.decode
def slow_decode(self, tokens, *args, **kwargs):
    if tokens.size(0) > 100:
        time.sleep(0.2)
    return decode(self, tokens, *args, **kwargs)
Transformer.decode = slow_decode
"""


def raw_post(url: str, path: str, body: bytes, content_type: str) -> tuple[int, dict, dict]:
    """(status, JSON answer, headers) of a POST of any bytes."""
    import http.client
    from urllib.parse import urlsplit

    connection = http.client.HTTPConnection(urlsplit(url).netloc, timeout=30)
    try:
        connection.request("POST", path, body, {"Content-Type": content_type})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read()), dict(answer.getheaders())
    finally:
        connection.close()


def hostile_bodies() -> list[tuple[str, bytes, str]]:
    plain = {"q": "a red house", "source": "en", "target": "de"}
    deep = b"[" * 100_000 + b"]" * 100_000
    boundary = "b0undary"
    multipart = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="q"\r\n\r\n'.encode()
        + b"\xff\xfe not UTF-8\r\n"
        + f'--{boundary}\r\nContent-Disposition: form-data; name="source"\r\n\r\nen\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="target"\r\n\r\nde\r\n--{boundary}--\r\n'.encode()
    )
    as_json = "application/json"
    return [
        ("/translate", json.dumps({**plain, "api_key": ["a", "b"]}).encode(), as_json),
        ("/translate", json.dumps({**plain, "api_key": {"a": 1}}).encode(), as_json),
        ("/translate", json.dumps(plain)[:-1].encode() + b', "alternatives": 1e309}', as_json),
        ("/translate", deep, as_json),
        ("/v1/translate", deep, as_json),
        ("/v1/translate", b'{"q": ' + deep + b"}", as_json),
        ("/translate", json.dumps(plain)[:-1].encode() + b', "q": "a \\ud800 b"}', as_json),
        ("/v1/translate", json.dumps({**plain, "prefix": ["\ud800"]}, ensure_ascii=True).encode(), as_json),
        ("/v1/translate", json.dumps({**plain, "prefix": ["Haus " * 2000]}).encode(), as_json),
        ("/v1/translate", json.dumps({**plain, "constraints": [["Haus"] * 17]}).encode(), as_json),
        ("/translate", multipart, f"multipart/form-data; boundary={boundary}"),
        ("/translate", b"--nothing--", "multipart/form-data; boundary=x"),
        ("/translate", json.dumps({**plain, "format": "html", "q": "a<b>" * 1250}).encode(), as_json),
        ("/v1/translate", json.dumps({**plain, "q": "a red house " * 416, "attention": True}).encode(), as_json),
        ("/nowhere", b"{}", as_json),
    ]


@pytest.mark.slow  # about 15 s: a server whose large requests are slowed down
def test_a_real_server_bounds_every_request_and_its_shutdown(trained_run):
    big_html = {"q": ["<b>the dog</b> a red house"] * 500, "source": "en", "target": "de", "format": "html"}
    plain_pair = {"source": "en", "target": "de"}
    plain = {"q": "a red house", **plain_pair}
    args = ["--checkpoint", trained_run, "--engine", "torch", "--timeout", "1", "--max-queue", "3"]
    with ServerProcess([*args, "--drain-seconds", "1", "--body-timeout", "1"], prelude=SLOW_BIG_BATCHES) as server:
        assert post(server.url + "/translate", plain)[0] == 200
        idle = server.rss_mb()

        # a body sent a byte at a time is answered 408 at --body-timeout, and its connection closed
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
            body = json.dumps(plain).encode()
            head = (
                f"POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
            )
            connection.sendall(head.encode() + b"\r\n\r\n")
            began, answer = time.monotonic(), b""
            for byte in body:
                try:
                    connection.sendall(bytes([byte]))
                except OSError:  # closed by the server
                    break
                if select.select([connection], [], [], 0.2)[0]:
                    break
            try:
                while chunk := connection.recv(4096):
                    answer += chunk
            except ConnectionResetError:  # a byte of ours reached the closed socket after its answer: keep what came
                pass
        assert answer.startswith(b"HTTP/1.1 408") and b"took more than 1 s to arrive" in answer, answer
        assert time.monotonic() - began < 4
        for path, body, kind in hostile_bodies():  # every one a 4xx with LibreTranslate's body
            began = time.monotonic()
            status, answer, _ = raw_post(server.url, path, body, kind)
            assert 400 <= status < 500 and list(answer) == ["error"], (path, body[:80], status, answer)
            assert time.monotonic() - began < 5, (path, body[:80])
        assert server.rss_mb() < 2 * idle  # the attention asked for on a 5,000-character line was refused

        # three large requests fill the queue: a fourth is 503; given up on at their timeout, they stop
        answers = []

        def send(path: str, body: dict) -> threading.Thread:
            sender = threading.Thread(target=lambda: answers.append(post(server.url + path, body)))
            sender.start()
            return sender

        senders = [send("/translate", big_html) for _ in range(3)]
        time.sleep(0.4)
        status, answer, headers = raw_post(server.url, "/translate", json.dumps(plain).encode(), "application/json")
        assert status == 503 and headers.get("retry-after") == "1", (status, answer)
        for sender in senders:
            sender.join()
        assert [status for status, _ in answers] == [504] * 3
        began = time.monotonic()
        assert post(server.url + "/translate", plain)[0] == 200
        assert time.monotonic() - began < 3  # not behind the abandoned requests' work (~20 s of it)

        # a client that disconnects: its request stops too
        with socket.create_connection(("127.0.0.1", server.port)) as connection:
            body = json.dumps(big_html).encode()
            head = "POST /translate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            head += f"Content-Length: {len(body)}\r\n\r\n"
            connection.sendall(head.encode() + body)
            time.sleep(0.3)
        began = time.monotonic()
        assert post(server.url + "/translate", plain)[0] == 200
        assert time.monotonic() - began < 3

        # the shutdown is bounded by --drain-seconds, however long the request in flight would take
        sender = send("/v1/translate", {"q": [f"the dog {n} a red house" for n in range(1000)], **plain_pair})
        time.sleep(0.3)
        began = time.monotonic()
        assert server.stop() == 0
        stopped_in = time.monotonic() - began
        sender.join()
    assert stopped_in < 1 + 5, server.stderr
    logged = [json.loads(line) for line in server.stderr.splitlines() if line.startswith("{")]
    assert 499 in [entry["status"] for entry in logged]
    assert "Traceback" not in server.stderr
