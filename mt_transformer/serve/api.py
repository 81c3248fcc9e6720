"""The requests of LibreTranslate's API (https://libretranslate.com/docs), checked before any
translation: `POST /translate` with `q` (a string, or a list of strings), `source` (a language
code, or "auto"), `target`, `format` (text or html), `alternatives` and `api_key`; and the
answer of `GET /languages`. What a client gets wrong is an ApiError: an HTTP status and a
one-line message, answered as LibreTranslate answers it, `{"error": message}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# English names of the languages a client's menu shows; other codes are shown as they are
NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


class ApiError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass(frozen=True)
class Limits:
    max_lines: int = 1000  # lines (the items of q) per request
    max_chars: int = 5000  # characters per line


@dataclass(frozen=True)
class TranslateRequest:
    lines: list[str]
    as_list: bool  # q was a list: so is the answer
    source: str
    target: str
    format: str
    alternatives: int
    api_key: str | None


def parse_translate(payload: Mapping, pairs: set[tuple[str, str]], limits: Limits) -> TranslateRequest:
    """The request of a /translate body (JSON, or a form with `q` given once or repeated), for a
    server that translates the (source, target) `pairs`."""
    if not isinstance(payload, Mapping):
        raise ApiError(400, "Invalid request: the body must be a JSON object or a form")
    q = payload.get("q")
    if q is None:
        raise ApiError(400, "Invalid request: missing q parameter")
    as_list = isinstance(q, list)
    lines = q if as_list else [q]
    if not all(isinstance(line, str) for line in lines):
        raise ApiError(400, "Invalid request: q must be a string or a list of strings")
    if not any(line.strip() for line in lines):
        raise ApiError(400, "Invalid request: q is empty")
    if len(lines) > limits.max_lines:
        raise ApiError(413, f"Invalid request: {len(lines)} lines in q, more than this server's {limits.max_lines}")
    longest = max(len(line) for line in lines)
    if longest > limits.max_chars:
        raise ApiError(413, f"Invalid request: a line of {longest} characters, more than {limits.max_chars}")
    target = _text(payload, "target")
    source = _text(payload, "source")
    if source == "auto":
        sources = sorted({s for s, t in pairs if t == target})
        if len(sources) != 1:
            raise ApiError(400, f"Invalid request: source auto needs one source language into {target}, not {sources}")
        source = sources[0]
    if (source, target) not in pairs:
        raise ApiError(400, f"{source} -> {target} is not available on this server (GET /languages lists the pairs)")
    format_ = payload.get("format") or "text"
    if format_ not in ("text", "html"):
        raise ApiError(400, f"Invalid request: format must be text or html, not {format_!r}")
    alternatives = payload.get("alternatives") or 0
    try:
        alternatives = int(alternatives)
    except (TypeError, ValueError):
        raise ApiError(400, "Invalid request: alternatives must be a whole number") from None
    if not 0 <= alternatives <= 10:
        raise ApiError(400, f"Invalid request: alternatives must be between 0 and 10, not {alternatives}")
    api_key = payload.get("api_key")
    if api_key is not None and not isinstance(api_key, str):
        raise ApiError(400, "Invalid request: api_key must be a string")
    return TranslateRequest(lines, as_list, source, target, format_, alternatives, api_key or None)


def _text(payload: Mapping, name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    return value


def languages(pairs: set[tuple[str, str]]) -> list[dict]:
    """GET /languages: every language the server reads or writes, with its name and the languages
    it translates into, as LibreTranslate lists them: a language the server only translates into
    comes with empty targets, so that clients building their target menus from this list find it."""
    codes = sorted({s for s, _ in pairs} | {t for _, t in pairs})
    return [
        {"code": code, "name": NAMES.get(code, code), "targets": sorted(t for s, t in pairs if s == code)}
        for code in codes
    ]
