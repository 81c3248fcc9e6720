"""The bodies LibreTranslate's clients send, read strictly: JSON, or a form (url-encoded or
multipart) where a repeated q is a list. Text that is not UTF-8, JSON nested past Python's
stack and a multipart body without its parts are ApiErrors (400), never a server error.

Multipart is read with the standard library's email parser rather than Starlette's form parser,
which reads a field that is not UTF-8 as Latin-1 and so passes it on as text."""

from __future__ import annotations

import asyncio
import email.parser
import email.policy
import json
from urllib.parse import parse_qs

from mt_transformer.serve.api import ApiError


async def read_payload(request) -> dict:
    """The fields of a /translate or /detect body (a Starlette request, its body already bounded)."""
    kind = request.headers.get("content-type", "")
    body = await request.body()
    if kind.split(";")[0].strip().lower() == "application/json":
        payload = json_object(body)
    elif kind.split(";")[0].strip().lower() == "multipart/form-data":  # parsing is slow for large bodies: off the loop
        payload = _one_or_list(await asyncio.to_thread(multipart_fields, body, kind))
    else:  # application/x-www-form-urlencoded, or a client that names no type
        try:
            payload = _one_or_list(parse_qs(body.decode("utf-8"), keep_blank_values=True, errors="strict"))
        except UnicodeDecodeError:
            raise ApiError(400, "Invalid request: the form is not UTF-8") from None
    return payload


def json_object(body: bytes) -> dict:
    try:
        payload = json.loads(body)
    except ValueError as error:  # not JSON, or not UTF-8
        raise ApiError(400, f"Invalid request: the body is not JSON ({type(error).__name__})") from None
    except RecursionError:
        raise ApiError(400, "Invalid request: the body is nested deeper than this server reads") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "Invalid request: the body must be a JSON object")
    return payload


def multipart_fields(body: bytes, content_type: str) -> dict[str, list[str]]:
    """Each named part of a multipart/form-data body, decoded as UTF-8, by name."""
    head = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    try:
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
        parts = list(message.iter_parts()) if message.is_multipart() else []
    except (RecursionError, ValueError, TypeError):
        parts = []
    if not parts:
        raise ApiError(400, "Invalid request: a multipart body without its parts")
    fields: dict[str, list[str]] = {}
    for part in parts:
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        data = part.get_payload(decode=True) or b""
        try:
            fields.setdefault(name, []).append(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise ApiError(400, f"Invalid request: the form's {name[:40]} is not UTF-8") from None
    return fields


def _one_or_list(fields: dict[str, list[str]]) -> dict:
    return {key: values if key == "q" and len(values) > 1 else values[0] for key, values in fields.items()}
