"""What wraps every request of the server: a bound on the size of its body, and one structured
access log line when it ends.

Both are plain ASGI middleware: they see the raw messages, so a body too large is refused while
it is still arriving, and the log line holds the status the client really got.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from datetime import datetime, timezone

# One JSON object per line, on its own handler: a log collector reads it without parsing a prefix.
access_log = logging.getLogger("mt_transformer.serve.access")


class BodyLimit:
    """Bodies of more than `max_bytes` are answered 413 before the app sees them: at once when
    Content-Length says so, else as soon as the bytes received pass the bound; a body still
    arriving `seconds` after its request began is answered 408 (a client sending a byte a second
    holds no connection). The body is read here and handed on whole (the app would hold it whole anyway)."""

    def __init__(self, app, max_bytes: int, seconds: float):
        self.app, self.max_bytes, self.seconds = app, max_bytes, seconds

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            return await answer_error(scope, send, 413, self._message(int(declared)))
        body, more, deadline = bytearray(), True, asyncio.get_running_loop().time() + self.seconds
        while more:
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                message = f"Request Timeout: the body took more than {self.seconds:g} s to arrive"
                return await answer_error(scope, send, 408, message, close=True)
            if message["type"] != "http.request":  # the client went away
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                return await answer_error(scope, send, 413, self._message(len(body)))
        whole = {"type": "http.request", "body": bytes(body), "more_body": False}

        async def replay():
            nonlocal whole
            if whole is None:
                return await receive()
            message, whole = whole, None
            return message

        await self.app(scope, replay, send)

    def _message(self, size: int) -> str:
        return f"Invalid request: a body of {size} bytes, more than this server's {self.max_bytes}"


class AccessLog:
    """One line per request when its response is sent: time, client, method, path, status,
    milliseconds, and what the endpoint put in the request's state (`lines`, `error`)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start, status = time.perf_counter(), 500

        async def recording_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            client = scope.get("client")
            entry = {
                "time": datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                "client": client[0] if client else None,
                "method": scope["method"],
                "path": scope["path"],
                "status": status,
                "ms": round(1000 * (time.perf_counter() - start), 1),
            }
            state = scope.get("state") or {}
            entry.update({key: state[key] for key in ("lines", "error") if key in state})
            access_log.info(json.dumps(entry, ensure_ascii=False))


async def answer_error(scope, send, status: int, message: str, close: bool = False) -> None:
    """A JSON error answered from middleware, noted for the access log; `close`: the connection
    ends with it (its body is not read to the end)."""
    scope.setdefault("state", {})["error"] = message
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(b"connection", b"close")] if close else []
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
