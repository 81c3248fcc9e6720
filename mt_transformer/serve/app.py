"""The translation server's ASGI app (FastAPI): LibreTranslate's API (`POST /translate`,
`GET /languages`, `POST /detect`, `GET /frontend/settings`), our own `POST /v1/translate`, the
operations endpoints (`GET /health`, `GET /ready`), a page to try it at `/`, and the OpenAPI
schema at `/openapi.json` (browsable at `/docs`).

The models load after start-up on the thread that will translate with them, so the server answers `/health` at once and
`/ready` turns true when they are loaded. Every translation goes through one DynamicBatcher, and
is given up on (dropped from the queue, or stopped at its next step) when its client disconnects
or its time runs out; docs/serving.md#bounds lists what bounds each request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from mt_transformer.errors import UserError
from mt_transformer.serve.api import ApiError, Limits, api_key, check_html, check_html_bound, languages, parse_translate
from mt_transformer.serve.batcher import Busy, DynamicBatcher
from mt_transformer.serve.bodies import read_payload
from mt_transformer.serve.middleware import AccessLog, BodyLimit
from mt_transformer.serve.models import Item, Models, Options, Result
from mt_transformer.serve.quotas import RequestQuota
from mt_transformer.serve.v1 import V1Request, V1Response, parse_v1, v1_response

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerSettings:
    limits: Limits = Limits()
    batch_wait: float = 0.005  # seconds a request waits for others to share its call
    batch_lines: int = 256  # most lines in one call (1: no batching)
    timeout: float = 60.0  # seconds a request may take before it is answered 504
    api_keys: frozenset[str] | None = None  # None: no key needed
    max_pending: int = 256  # requests waiting or being translated at once; more: 503 with Retry-After
    req_limit: int | None = None  # requests a minute per API key where keys are set, else per address; more: 429
    stop_grace: float = 5.0  # seconds a call may go on at shutdown after its requests were given up on
    body_timeout: float = 30.0  # seconds a request's body may take to arrive; longer: 408

    @property
    def max_body(self) -> int:
        """The largest body a request within the limits can have: UTF-8 (4 bytes a character at most)."""
        return 4 * self.limits.max_lines * (self.limits.max_chars + 16) + 65536


class _Server:
    """What the endpoints share: the models once loaded, the batcher, the settings."""

    def __init__(self, settings: ServerSettings):
        self.settings = settings
        self.models: Models | None = None
        self.load_error: str | None = None
        self.batcher = DynamicBatcher(self._run, settings.batch_wait, settings.batch_lines, settings.max_pending)
        self.quota = RequestQuota(settings.req_limit) if settings.req_limit else None

    def _run(self, options: Options, items: list[Item], given_up: Callable[[], bool]) -> list[Result]:
        return self.models.run(options, items, given_up)

    @property
    def pairs(self) -> set[tuple[str, str]]:
        if self.models is None:
            raise ApiError(503, self.load_error or "the models are still loading (GET /ready says when they are)")
        return self.models.pairs

    def admit(self, request: Request, key: str | None) -> None:
        """403 for a missing or wrong key where keys are required; 429 past the client's quota: per
        key where keys are configured (checked above), else per address (a key made up per request
        would otherwise be a fresh quota each time)."""
        keys = self.settings.api_keys
        if keys is not None and key not in keys:
            raise ApiError(403, "Invalid API key")
        if self.quota is not None:
            address = request.client.host if request.client else "-"
            self.quota.take(f"key {key}" if keys is not None else f"address {address}")

    async def translate(self, options: Options, items: list[Item], request: Request) -> list[Result]:
        """The results of the items, through the batcher; failures as ApiErrors. The work is given
        up on when the client disconnects or the timeout passes."""
        work = asyncio.ensure_future(self.batcher.submit(options, items))
        watch = asyncio.ensure_future(_disconnect(request))
        try:
            await asyncio.wait({work, watch}, timeout=self.settings.timeout, return_when=asyncio.FIRST_COMPLETED)
            if not work.done():
                work.cancel()
                if watch.done():
                    raise ApiError(499, "the client closed the connection")
                raise ApiError(504, f"the translation took more than {self.settings.timeout:g} s")
            return work.result()
        except ApiError:
            raise
        except Busy as busy:
            raise ApiError(503, f"the server is busy ({busy}); try again", {"Retry-After": "1"}) from None
        except UserError as error:  # a phrase the vocabulary cannot spell, settings out of range
            raise ApiError(400, str(error)) from None
        except Exception as error:  # out of memory, a fault of the engine: this request only
            first = (str(error).strip().splitlines() or [""])[0]
            log.error("translation failed: %s: %s", type(error).__name__, first)
            raise ApiError(500, f"the translation failed: {type(error).__name__}: {first}") from None
        finally:
            work.cancel()  # where the caller itself was cancelled (a server shutting down)
            watch.cancel()


async def _disconnect(request: Request) -> None:
    """Returns when the client has closed the connection (its body was read before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(
    load: Callable[[], Models], settings: ServerSettings, on_load_error: Callable[[str], None] | None = None
) -> FastAPI:
    """The app; `load` runs on the translation thread after start-up. A failure to load (a UserError) is
    kept for /ready and handed to `on_load_error` (mt-serve then stops with its message)."""
    server = _Server(settings)

    async def load_models():
        try:
            server.models = await server.batcher.run_alone(load)
            log.info("ready: %s", ", ".join(f"{s} -> {t}" for s, t in sorted(server.models.pairs)))
        except Exception as error:  # of any kind: the server must not wait for models that never come
            message = str(error) if isinstance(error, UserError) else _one_line(error, "the models could not be loaded")
            server.load_error = message
            log.error("%s", message)
            if on_load_error is not None:
                on_load_error(message)

    @asynccontextmanager
    async def lifespan(app):
        server.batcher.start()
        loading = asyncio.create_task(load_models())
        yield
        await server.batcher.close(settings.stop_grace)  # in-flight requests are finished before the server stops
        loading.cancel()

    app = FastAPI(title="mt-serve", summary="Machine translation with mt_transformer models", lifespan=lifespan)
    app.state.server = server
    _error_handlers(app)
    _operations(app, server)
    _libretranslate(app, server)

    @app.post("/v1/translate", response_model=V1Response, response_model_exclude_none=True)
    async def v1_translate(body: V1Request, request: Request):
        server.admit(request, body.api_key)
        options, items = parse_v1(body, server.pairs, settings.limits)
        request.state.lines = len(items)
        return v1_response(body, options, await server.translate(options, items, request))

    app.add_middleware(BodyLimit, max_bytes=settings.max_body, seconds=settings.body_timeout)
    app.add_middleware(AccessLog)  # the last added is the outermost: it sees the 413s too
    return app


def _error_handlers(app: FastAPI) -> None:
    """Every error a client gets is `{"error": "one line"}` with its status, as LibreTranslate answers."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        request.state.error = error.message
        return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)

    @app.exception_handler(HTTPException)  # the framework's own: 404, 405, a body it cannot parse
    async def http_error(request: Request, error: HTTPException):
        return await api_error(request, ApiError(error.status_code, str(error.detail), error.headers))

    @app.exception_handler(Exception)  # a fault of ours: still a JSON answer of one line
    async def fault(request: Request, error: Exception):
        log.error("%s %s: %s", request.method, request.url.path, _one_line(error, "internal error"))
        return await api_error(request, ApiError(500, _one_line(error, "internal error")))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        first = error.errors()[0]
        loc = [part for part in first.get("loc", ()) if part != "body"]
        # the field, then list positions: not the names of the union's members pydantic tried
        where = ".".join(str(part) for k, part in enumerate(loc) if k == 0 or isinstance(part, int))
        message = f"Invalid request: {where + ': ' if where else ''}{first.get('msg', 'invalid')}"
        return await api_error(request, ApiError(400, message))


def _operations(app: FastAPI, server: _Server) -> None:
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page():
        return resources.files("mt_transformer.serve").joinpath("page.html").read_text(encoding="utf-8")

    @app.get("/health", summary="Liveness: the server answers")
    async def health():
        if server.models is None:
            return {"status": "ok"}
        return {"status": "ok", "engines": server.models.engines}

    @app.get("/ready", summary="Readiness: the models are loaded")
    async def ready():
        if server.models is None:
            return JSONResponse({"ready": False, "error": server.load_error}, status_code=503)
        return {"ready": True, "pairs": [f"{s}-{t}" for s, t in sorted(server.models.pairs)]}


def _libretranslate(app: FastAPI, server: _Server) -> None:
    settings = server.settings

    @app.get("/languages", summary="Every language this server reads or writes, with the languages it translates into")
    async def get_languages():
        return languages(server.pairs)

    @app.get("/frontend/settings", summary="What a LibreTranslate client asks before it starts")
    async def frontend_settings():
        names = [entry for entry in languages(server.pairs) if entry["targets"]] if server.models else []
        return {
            "charLimit": settings.limits.max_chars,
            "frontendTimeout": int(1000 * settings.timeout),
            "keyRequired": settings.api_keys is not None,
            "suggestions": False,
            "filesTranslation": False,
            "supportedFilesFormat": [],
            "language": {"source": names[0] if names else None, "target": None},
        }

    @app.post("/translate", summary="LibreTranslate's translate", openapi_extra=_TRANSLATE_BODY)
    async def translate(request: Request):
        payload = await read_payload(request)
        server.admit(request, api_key(payload))
        asked = parse_translate(payload, server.pairs, settings.limits)
        if asked.format == "html" and asked.alternatives:
            raise ApiError(400, "Invalid request: alternatives are for format text")
        html = asked.format == "html"
        if html:  # each fragment's sentences are translated apart, its inline elements put back
            check_html_bound(asked.lines, settings.limits)  # a regular expression a line: at once
            await run_in_threadpool(check_html, asked.lines, settings.limits)  # reading HTML: off the event loop
        request.state.lines = len(asked.lines)
        options = Options(asked.source, asked.target, n_best=1 + asked.alternatives, html=html)
        results = await server.translate(options, [Item(text) for text in asked.lines], request)
        translated = [r.hypotheses[0].text for r in results]
        answer = {"translatedText": translated if asked.as_list else translated[0]}
        if asked.alternatives:
            others = [[h.text for h in r.hypotheses[1:]] for r in results]
            answer["alternatives"] = others if asked.as_list else others[0]
        if payload.get("source") == "auto":
            detected = {"confidence": 100.0, "language": asked.source}
            answer["detectedLanguage"] = [detected] * len(translated) if asked.as_list else detected
        return answer

    @app.post("/detect", summary="The source language: the one this server translates from", openapi_extra=_DETECT_BODY)
    async def detect(request: Request):
        payload = await read_payload(request)
        server.admit(request, api_key(payload))
        if not isinstance(payload.get("q"), str) or not payload["q"].strip():
            raise ApiError(400, "Invalid request: missing q parameter")
        sources = sorted({s for s, _ in server.pairs})
        return [{"confidence": round(100.0 / len(sources), 1), "language": s} for s in sources]


def _one_line(error: BaseException, what: str) -> str:
    first = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{what}: {type(error).__name__}{': ' + first if first else ''}"


_FIELDS = {
    "q": {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]},
    "source": {"type": "string", "description": "a language code, or auto"},
    "target": {"type": "string"},
    "format": {"type": "string", "enum": ["text", "html"], "default": "text"},
    "alternatives": {"type": "integer", "minimum": 0, "maximum": 10, "default": 0},
    "api_key": {"type": "string"},
}


def _body(fields: list[str], required: list[str]) -> dict:
    schema = {"type": "object", "properties": {name: _FIELDS[name] for name in fields}, "required": required}
    content = {kind: {"schema": schema} for kind in ("application/json", "application/x-www-form-urlencoded")}
    return {"requestBody": {"required": True, "content": content}}


_TRANSLATE_BODY = _body(list(_FIELDS), ["q", "source", "target"])
_DETECT_BODY = _body(["q", "api_key"], ["q"])
