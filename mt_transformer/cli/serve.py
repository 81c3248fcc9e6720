"""mt-serve: trained models behind an HTTP API that LibreTranslate's clients speak, with a page to
try them (docs/serving.md)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys

from mt_transformer.cli.common import Parser, at_least, entry_point, runtime_options, whole
from mt_transformer.errors import UserError


def _parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mt-serve",
        description="Serve trained models over HTTP: LibreTranslate's API, POST /v1/translate, a page at /.",
    )
    parser.add_argument(
        "--checkpoint",
        nargs="+",
        action="extend",
        required=True,
        help="run directories, checkpoints or mt-export --format ctranslate2 directories, one per language "
        "pair; a model trained with target tags serves each of its pairs",
    )
    parser.add_argument("--host", default="127.0.0.1", help="the address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=whole(0, 65535), default=5000)
    runtime_options(parser)
    parser.add_argument("--max-lines", type=whole(1), default=1000, help="lines (items of q) per request; more: 413")
    parser.add_argument("--max-chars", type=whole(1), default=5000, help="characters per line; more: 413")
    parser.add_argument(
        "--batch-wait-ms",
        type=at_least(0),
        default=5.0,
        help="how long a request waits for others to share its translator call (0: it goes alone)",
    )
    parser.add_argument(
        "--batch-lines", type=whole(1), default=256, help="the most lines in one translator call (1: no batching)"
    )
    parser.add_argument(
        "--char-limit", type=whole(1), help="characters per request, all lines together; more: 413 (default: no limit)"
    )
    parser.add_argument(
        "--req-limit",
        type=whole(1),
        help="requests a minute per API key where --api-keys are set, else per address; more: 429 (default: no limit)",
    )
    parser.add_argument(
        "--max-queue",
        type=whole(1),
        default=256,
        help="requests waiting or being translated at once; more: 503 with Retry-After (default: 256)",
    )
    parser.add_argument(
        "--timeout", type=at_least(0), default=60.0, help="seconds a request may take; longer: 504, and its work stops"
    )
    parser.add_argument(
        "--body-timeout",
        type=at_least(0),
        default=30.0,
        help="seconds a request's body may take to arrive; longer: 408, and the connection is closed",
    )
    parser.add_argument(
        "--api-keys", metavar="FILE", help="require LibreTranslate's api_key: one key per line (# comments)"
    )
    parser.add_argument(
        "--drain-seconds",
        type=at_least(0),
        default=30.0,
        help="on SIGTERM or Ctrl-C: stop accepting, finish the requests in flight for up to this long, exit",
    )
    return parser


@entry_point
def serve_main(argv=None):
    args = _parser().parse_args(argv)
    _check_args(args)
    try:
        import uvicorn

        from mt_transformer.serve.app import ServerSettings, create_app
    except ImportError as error:
        missing = f"{error.name} is missing"
        raise UserError(f"mt-serve needs the serve extra: pip install 'mt_transformer[serve]' ({missing})") from None
    from mt_transformer.serve.api import Limits
    from mt_transformer.serve.middleware import access_log
    from mt_transformer.serve.models import load_models

    settings = ServerSettings(
        Limits(args.max_lines, args.max_chars, args.char_limit),
        args.batch_wait_ms / 1000,
        args.batch_lines,
        args.timeout,
        _api_keys(args.api_keys),
        args.max_queue,
        args.req_limit,
        body_timeout=args.body_timeout,
    )
    listening = _listen(args.host, args.port)
    failure: list[str] = []

    def stop(message: str) -> None:
        failure.append(message)
        server.should_exit = True

    def load():
        return load_models(
            args.checkpoint, args.engine, args.device, args.compute_type, args.threads, args.worker_threads
        )

    app = create_app(load, settings, on_load_error=stop)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    access_log.addHandler(handler)
    access_log.propagate = False
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_config=None,  # uvicorn's lines go through the commands' logging, in its format
        access_log=False,  # the app writes its own, one JSON line per request
        timeout_graceful_shutdown=args.drain_seconds,
    )
    server = uvicorn.Server(config)
    # uvicorn drains on SIGTERM and then sends the signal again: a handler that does nothing lets
    # the command end normally, with exit code 0, once the requests in flight are answered
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    server.run(sockets=[listening])
    _exit_after_serving(app.state.server.batcher.calling, failure)


def _exit_after_serving(calling: bool, failure: list[str]) -> None:
    """After the server stopped: exit code 0, or 2 with the load failure that stopped it. A call
    still `calling` (CTranslate2's does not stop between steps) would hold a normal exit until it ends."""
    if calling:
        logging.getLogger("mt_transformer").warning("stopped with a translator call still running")
        if failure:
            print(f"error: {failure[0]}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(2 if failure else 0)
    if failure:
        raise UserError(failure[0])


def _listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so that a port in use is a one-line error."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listening = socket.socket(family, socket.SOCK_STREAM)
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind((host, port))
        listening.listen(2048)
    except (OSError, OverflowError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UserError(f"--host/--port: cannot listen on {host}:{port} ({reason})") from None
    listening.set_inheritable(True)
    return listening


def _check_args(args) -> None:
    """One-line errors for checkpoints that do not exist or hold none, before the server starts
    (the numbers are checked as they are parsed)."""
    from mt_transformer.checkpoint import resolve
    from mt_transformer.decoding.runtime import is_export

    for path in args.checkpoint:
        if not os.path.exists(path):
            raise UserError(f"--checkpoint: {path}: no such file or directory")
        if not is_export(path):
            try:
                resolve(path)
            except UserError as error:
                raise UserError(f"--checkpoint: {error}") from None


def _api_keys(path: str | None) -> frozenset[str] | None:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            keys = frozenset(line.strip() for line in f if line.strip() and not line.lstrip().startswith("#"))
    except OSError as error:
        raise UserError(f"--api-keys: {path}: {error.strerror}") from None
    if not keys:
        raise UserError(f"--api-keys: {path} holds no key")
    return keys
