"""The requests of LibreTranslate's API (https://libretranslate.com/docs), checked before any
translation: `POST /translate` with `q` (a string, or a list of strings), `source` (a language
code, or "auto"), `target`, `format` (text or html), `alternatives` and `api_key`; and the
answer of `GET /languages`. What a client gets wrong is an ApiError: an HTTP status and a
one-line message, answered as LibreTranslate answers it, `{"error": message}`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from mt_transformer.markup.html import HtmlFragment, TooManyPieces, least_pieces
from mt_transformer.markup.translation import has_markup

# English names of the languages a client's menu shows; other codes are shown as they are
NAMES = {
    "ar": "Arabic", "cs": "Czech", "da": "Danish", "de": "German", "el": "Greek", "en": "English",
    "es": "Spanish", "fi": "Finnish", "fr": "French", "hi": "Hindi", "hu": "Hungarian", "it": "Italian",
    "ja": "Japanese", "ko": "Korean", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sv": "Swedish", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclass(frozen=True)
class Limits:
    max_lines: int = 1000  # lines (the items of q) per request; with format html, runs of text
    max_chars: int = 5000  # characters per line
    char_limit: int | None = None  # characters per request, all lines together (LibreTranslate's --char-limit)


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
    check_size(lines, limits, "lines in q")
    check_text(lines, "q")
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
    if isinstance(alternatives, str) and alternatives.strip().isdigit():  # a form's value
        alternatives = int(alternatives)
    if not isinstance(alternatives, int) or isinstance(alternatives, bool) or not 0 <= alternatives <= 10:
        raise ApiError(
            400, f"Invalid request: alternatives must be a whole number from 0 to 10, not {alternatives!r}"[:200]
        )
    return TranslateRequest(lines, as_list, source, target, format_, alternatives, api_key(payload))


def api_key(payload: Mapping) -> str | None:
    """The request's api_key: a string, or None where it gives none."""
    key = payload.get("api_key")
    if key is not None and not isinstance(key, str):
        raise ApiError(400, "Invalid request: api_key must be a string")
    return key or None


def check_size(lines: list[str], limits: Limits, what: str) -> None:
    """413 for more lines, longer lines or more characters in all than the server takes."""
    if len(lines) > limits.max_lines:
        raise ApiError(413, f"Invalid request: {len(lines)} {what}, more than this server's {limits.max_lines}")
    longest = max(map(len, lines), default=0)
    if longest > limits.max_chars:
        raise ApiError(413, f"Invalid request: a line of {longest} characters, more than {limits.max_chars}")
    total = sum(map(len, lines))
    if limits.char_limit is not None and total > limits.char_limit:
        raise ApiError(413, f"Invalid request: {total} characters, more than this server's {limits.char_limit}")


HTML_PIECES = "sentences and inline elements in the HTML of q"


def _too_many_pieces(limits: Limits) -> ApiError:
    return ApiError(413, f"Invalid request: more {HTML_PIECES} than this server's {limits.max_lines}")


def check_html_bound(lines: list[str], limits: Limits) -> None:
    """413 at once where the HTML holds more inline elements than the server takes lines, by a
    bound one regular expression a line finds (markup/html.py's least_pieces): no reading."""
    least = 0
    for line in lines:
        least += least_pieces(line) if has_markup(line) else 0
        if least > limits.max_lines:
            raise _too_many_pieces(limits)


def check_html(lines: list[str], limits: Limits) -> None:
    """413 for HTML with more (or longer) sentences and inline elements than the server takes lines:
    read with the count bounded, so a request past it costs only the reading up to there (the
    caller has checked check_html_bound first, on the event loop)."""
    pieces, budget = [], limits.max_lines
    for line in lines:
        if has_markup(line):
            try:
                fragment = HtmlFragment(line, limit=budget)
            except TooManyPieces:
                raise _too_many_pieces(limits) from None
            budget -= fragment.pieces
            pieces += [s.text for s in fragment.sentences] + [
                span.start_tag for s in fragment.sentences for span in s.spans
            ]
    check_size(pieces, limits, HTML_PIECES)


def check_text(values: list[str], what: str) -> None:
    """400 for a string that is no text: a lone surrogate (JSON's \\ud800) has no UTF-8."""
    for value in values:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(400, f"Invalid request: {what} holds a lone surrogate, which is not text") from None


def _text(payload: Mapping, name: str) -> str:
    value = payload.get(name)
    if not isinstance(value, str) or not value:
        raise ApiError(400, f"Invalid request: missing {name} parameter")
    check_text([value], name)
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
