"""The server's app in this process (httpx's ASGI client): LibreTranslate's API and /v1/translate
with a trained tiny model, malformed requests, limits, keys, timeouts, readiness and the log."""

import contextlib
import json
import logging
import threading
import time

import pytest

fastapi_testclient = pytest.importorskip("fastapi.testclient")

from conftest import translator  # noqa: E402
from mt_transformer.errors import UserError  # noqa: E402
from mt_transformer.serve.api import Limits  # noqa: E402
from mt_transformer.serve.app import ServerSettings, create_app  # noqa: E402
from mt_transformer.serve.models import Models, load_models  # noqa: E402


@contextlib.contextmanager
def client_of(load, settings=ServerSettings(), **keys):
    """A started client whose models have loaded (or failed to)."""
    with fastapi_testclient.TestClient(create_app(load, settings, **keys)) as client:
        deadline = time.monotonic() + 30
        while client.get("/ready").status_code != 200 and client.app.state.server.load_error is None:
            assert time.monotonic() < deadline, "the models never loaded"
            time.sleep(0.01)
        yield client


@pytest.fixture(scope="module")
def models(trained_run):
    """Our engine: the tests below compare its answers with our translator's."""
    return load_models([trained_run], "torch", device="cpu")


@pytest.fixture
def client(models):
    with client_of(lambda: models) as client:
        yield client


def access_lines(caplog) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "mt_transformer.serve.access"]


def test_translate_as_libretranslate_clients_send_it(client, trained_run):
    offline = translator(trained_run)(["a red house", "the dog"])
    expected = [t[0].text for t in offline]
    one = client.post("/translate", json={"q": "a red house", "source": "en", "target": "de"})
    assert one.status_code == 200 and one.json() == {"translatedText": expected[0]}
    many = client.post("/translate", json={"q": ["a red house", "the dog"], "source": "en", "target": "de"})
    assert many.json() == {"translatedText": expected}
    form = client.post("/translate", data={"q": "a red house", "source": "en", "target": "de", "format": "text"})
    assert form.json() == {"translatedText": expected[0]}
    repeated = client.post("/translate", data={"q": ["a red house", "the dog"], "source": "en", "target": "de"})
    assert repeated.json() == {"translatedText": expected}
    multipart = client.post(
        "/translate", files={"q": (None, "the dog"), "source": (None, "en"), "target": (None, "de")}
    )
    assert multipart.json() == {"translatedText": expected[1]}


def test_the_default_engine_serves_ctranslate2_and_ours_for_constraints_and_attention(trained_run):
    from mt_transformer.decoding.engines import open_translator

    models = load_models([trained_run], device="cpu")
    assert models.engines["en-de"].startswith("CTranslate2 on cpu")
    offline = open_translator(trained_run, "auto", "cpu")(["a red house"])[0][0].text
    with client_of(lambda: models) as client:
        assert client.get("/health").json()["engines"] == models.engines
        one = client.post("/translate", json={"q": "a red house", "source": "en", "target": "de"})
        assert one.json() == {"translatedText": offline}
        body = {"q": ["a red house"], "source": "en", "target": "de", "constraints": [["Haus"]], "attention": True}
        answer = client.post("/v1/translate", json=body).json()["translations"][0]
    assert "Haus" in answer["hypotheses"][0]["text"] and answer["attention"]["weights"]  # on our engine


def test_auto_source_alternatives_and_html(client):
    answer = client.post(
        "/translate", json={"q": "the dog", "source": "auto", "target": "de", "alternatives": 1}
    ).json()
    assert answer["detectedLanguage"] == {"confidence": 100.0, "language": "en"}
    assert len(answer["alternatives"]) == 1 and answer["alternatives"][0] != answer["translatedText"]
    html = client.post(
        "/translate",
        json={"q": '<p class="x">the dog <code>a_b</code> <b>a red house</b></p>', "source": "en", "target": "de",
              "format": "html"},
    ).json()["translatedText"]  # fmt: skip
    assert html.startswith('<p class="x">') and "<code>a_b</code> <b>" in html and html.endswith("</b></p>")
    broken = client.post(
        "/translate", json={"q": "<p>the dog <b>a red", "source": "en", "target": "de", "format": "html"}
    )
    assert broken.status_code == 200 and broken.json()["translatedText"].startswith("<p>")


def test_languages_detect_settings_and_schema(client):
    assert client.get("/languages").json() == [
        {"code": "de", "name": "German", "targets": []},
        {"code": "en", "name": "English", "targets": ["de"]},
    ]
    assert client.post("/detect", data={"q": "the dog"}).json() == [{"confidence": 100.0, "language": "en"}]
    settings = client.get("/frontend/settings").json()
    assert settings["keyRequired"] is False and settings["charLimit"] == 5000
    assert settings["language"]["source"]["code"] == "en"  # a language with targets, not a target alone
    schema = client.get("/openapi.json").json()
    assert {"/translate", "/languages", "/detect", "/v1/translate", "/health", "/ready"} <= set(schema["paths"])
    assert "/" not in schema["paths"] and '<select id="source">' in client.get("/").text


def test_v1_translate_offers_what_mt_translate_does(client, trained_run):
    lines = ["a red house", "the dog"]
    offline = translator(trained_run, beam_size=3, n_best=2)(lines)
    answer = client.post(
        "/v1/translate", json={"q": lines, "source": "en", "target": "de", "beam": 3, "n_best": 2, "alignment": True}
    ).json()
    for line, expected in zip(answer["translations"], offline):
        assert [h["text"] for h in line["hypotheses"]] == [t.text for t in expected]
        assert [h["score"] for h in line["hypotheses"]] == pytest.approx([t.score for t in expected], abs=1e-3)
        assert all(h["alignment"] for h in line["hypotheses"]) and "attention" not in line
    best = answer["translations"][0]["hypotheses"][0]["text"]
    prefix = best.split()[0]
    forced = client.post(
        "/v1/translate",
        json={"q": ["the dog"], "source": "en", "target": "de", "prefix": [prefix], "attention": True,
              "avoid": [[]], "constraints": [[]]},
    ).json()["translations"][0]  # fmt: skip
    assert forced["hypotheses"][0]["text"].startswith(prefix)
    weights = forced["attention"]["weights"]
    assert len(weights) == len(forced["attention"]["target_pieces"])
    assert all(len(row) == len(forced["attention"]["source_pieces"]) and sum(row) == pytest.approx(1, abs=1e-2)
               for row in weights)  # fmt: skip


@pytest.mark.parametrize(
    "body, status, says",
    [
        ({"q": "x", "source": "en", "target": "de", "beam": 0}, 400, "beam"),
        ({"q": "x", "source": "en", "target": "de", "beam": 2, "n_best": 3}, 400, "n_best"),
        ({"q": ["x", "y"], "source": "en", "target": "de", "prefix": ["a"]}, 400, "prefix has 1 items"),
        ({"q": "x", "source": "en", "target": "fr"}, 400, "en -> fr"),
        ({"q": "x", "source": "en", "target": "de", "colour": 1}, 400, "colour"),
        ({"q": 3, "source": "en", "target": "de"}, 400, "q:"),
        ({"q": "x", "source": "en", "target": "de", "constraints": [["\u2603\u2603"]]}, 400, "vocabulary lacks"),
    ],
)
def test_v1_refuses_what_it_cannot_do(client, body, status, says):
    answer = client.post("/v1/translate", json=body)
    assert answer.status_code == status and says in answer.json()["error"]
    assert "\n" not in answer.json()["error"]


def test_malformed_requests_are_one_line_4xx_and_the_server_goes_on(client, caplog):
    caplog.set_level(logging.INFO)
    ok = {"source": "en", "target": "de"}
    requests = [
        (dict(content=b'{"q": "the dog", ', headers={"Content-Type": "application/json"}), 400),
        (dict(content=b'{"q": "\xff\xfe dog", "source": "en"}', headers={"Content-Type": "application/json"}), 400),
        (dict(content=b"q=%ff%fe&source=en&target=de"), 400),
        (dict(json=["q", "the dog"]), 400),
        (dict(json={"q": 5, **ok}), 400),
        (dict(json={"q": "the dog", "source": "en", "target": "xx"}), 400),
        (dict(json={"q": "", **ok}), 400),
        (dict(json={"q": ["   ", ""], **ok}), 400),
        (dict(json={"q": ["the dog"] * 10_000, **ok}), 413),
        (dict(json={"q": "dog " * 250_000, **ok}), 413),
        (dict(json={"q": "the dog", "format": "pdf", **ok}), 400),
        (dict(json={"q": "the dog", "alternatives": "many", **ok}), 400),
        (dict(json={"q": "<p>the dog", "format": "html", "alternatives": 2, **ok}), 400),
        (dict(json={"q": ["<s>a. " * 833] * 100, "format": "html", **ok}), 413),  # read up to its limit only
    ]
    for keys, status in requests:
        answer = client.post("/translate", **keys)
        assert answer.status_code == status, (keys, answer.text)
        message = answer.json()["error"]
        assert message and "\n" not in message and "Traceback" not in message
    assert client.post("/translate", json={"q": "the dog", **ok}).status_code == 200
    logged = access_lines(caplog)
    assert len(logged) == len(requests) + 1 and [e["status"] for e in logged[:-1]] == [s for _, s in requests]
    server_records = [r for r in caplog.records if not r.name.startswith("httpx")]  # not the client's
    assert all(r.name == "mt_transformer.serve.access" for r in server_records)


def test_api_keys(models):
    settings = ServerSettings(api_keys=frozenset({"secret"}))
    with client_of(lambda: models, settings) as client:
        body = {"q": "the dog", "source": "en", "target": "de"}
        assert client.post("/translate", json=body).status_code == 403
        wrong = client.post("/translate", json={**body, "api_key": "guess"})
        assert wrong.status_code == 403 and wrong.json() == {"error": "Invalid API key"}
        assert client.post("/translate", data={**body, "api_key": "secret"}).status_code == 200
        assert client.post("/v1/translate", json={**body, "api_key": "guess"}).status_code == 403
        assert client.post("/v1/translate", json={**body, "api_key": "secret"}).status_code == 200
        assert client.get("/frontend/settings").json()["keyRequired"] is True


def test_bodies_past_the_limit_are_413_before_they_are_read(models):
    settings = ServerSettings(limits=Limits(max_lines=2, max_chars=10))
    assert settings.max_body < 200_000
    with client_of(lambda: models, settings) as client:
        huge = b"q=" + b"a" * settings.max_body
        assert client.post("/translate", content=huge).status_code == 413

        def chunks():  # no Content-Length: counted as it arrives
            for _ in range(settings.max_body // 1000 + 2):
                yield b"a" * 1000

        streamed = client.post("/translate", content=chunks())
        assert streamed.status_code == 413 and "more than" in streamed.json()["error"]
        assert client.post("/translate", json={"q": "the dog", "source": "en", "target": "de"}).status_code == 200


class FakeModels(Models):
    """Lines as their own translations, slowly for "slow" and failing for "boom"."""

    engines = {"en-de": "fake"}

    def __init__(self):
        super().__init__({("en", "de"): None})
        self.calls = []

    def run(self, options, items, given_up=lambda: False):
        self.calls.append([item.text for item in items])
        if any("boom" in item.text for item in items):
            raise RuntimeError("CUDA out of memory.\nmore lines")
        if any("slow" in item.text for item in items):
            time.sleep(1.0)
        from mt_transformer.decoding.translator import Translation
        from mt_transformer.serve.models import Result

        return [Result([Translation(item.text.upper(), [], 0.0, 0.0)]) for item in items]


def test_a_failed_call_fails_its_request_only_and_timeouts_are_504():
    fake = FakeModels()
    settings = ServerSettings(batch_wait=0.2, timeout=0.5)
    with client_of(lambda: fake, settings) as client:
        answers = {}

        def send(text):
            answers[text] = client.post("/translate", json={"q": text, "source": "en", "target": "de"})

        threads = [threading.Thread(target=send, args=(text,)) for text in ("one", "boom", "two")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers["one"].json() == {"translatedText": "ONE"} and answers["two"].json() == {"translatedText": "TWO"}
        assert answers["boom"].status_code == 500
        assert answers["boom"].json()["error"] == "the translation failed: RuntimeError: CUDA out of memory."
        assert any(len(call) == 3 for call in fake.calls), "the three requests were never batched"
        late = client.post("/translate", json={"q": "slow", "source": "en", "target": "de"})
        assert late.status_code == 504 and "0.5 s" in late.json()["error"]
        assert client.get("/health").status_code == 200


def test_ready_turns_true_when_the_models_are_loaded():
    loaded = threading.Event()

    def load():
        loaded.wait(10)
        return FakeModels()

    app = create_app(load, ServerSettings())
    with fastapi_testclient.TestClient(app) as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/ready").status_code == 503
        waiting = client.post("/translate", json={"q": "one", "source": "en", "target": "de"})
        assert waiting.status_code == 503 and "loading" in waiting.json()["error"]
        loaded.set()
        deadline = time.monotonic() + 10
        while client.get("/ready").status_code != 200:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert client.get("/ready").json() == {"ready": True, "pairs": ["en-de"]}


@pytest.mark.parametrize(
    "error, says",
    [
        (UserError("--checkpoint: runs/x: no checkpoint"), "--checkpoint: runs/x: no checkpoint"),
        (RecursionError("maximum recursion depth exceeded\n..."), "the models could not be loaded: RecursionError: "),
        (RuntimeError(), "the models could not be loaded: RuntimeError"),
    ],
)
def test_a_failure_to_load_of_any_kind_is_kept_and_reported(error, says, caplog):
    reported = []

    def load():
        raise error

    with client_of(load, on_load_error=reported.append) as client:
        assert len(reported) == 1 and reported[0].startswith(says) and "\n" not in reported[0]
        assert client.get("/ready").json() == {"ready": False, "error": reported[0]}
        assert client.get("/languages").status_code == 503
    assert reported[0] in caplog.text  # logged


def test_request_and_character_limits_per_client(models):
    settings = ServerSettings(limits=Limits(char_limit=20), req_limit=2)
    with client_of(lambda: models, settings) as client:
        body = {"q": ["a red house", "the dog"], "source": "en", "target": "de"}
        assert client.post("/translate", json=body).status_code == 200
        too_long = client.post("/translate", json={**body, "q": ["a red house", "the dog", "a cat"]})
        assert too_long.status_code == 413 and "23 characters, more than this server's 20" in too_long.json()["error"]
        third = client.post("/translate", json=body)  # the address's third request this minute
        assert third.status_code == 429 and int(third.headers["retry-after"]) <= 60
        assert third.json()["error"].startswith("Too many requests: 2 a minute from one client")
        # without configured keys, a key made up per request is no quota of its own
        made_up = [client.post("/translate", json={**body, "api_key": f"k{i}"}).status_code for i in range(10)]
        assert made_up == [429] * 10
    keyed = ServerSettings(limits=Limits(char_limit=20), req_limit=2, api_keys=frozenset({"k1", "k2"}))
    with client_of(lambda: models, keyed) as client:
        for key in ("k1", "k1", "k2"):  # with configured keys, each key is a client of its own
            assert client.post("/translate", json={**body, "api_key": key}).status_code == 200
        assert client.post("/translate", json={**body, "api_key": "k1"}).status_code == 429
