"""An `mt-serve` process on 127.0.0.1 for the tests and the benchmarks: started on a free port,
waited for until it is ready, stopped with SIGTERM; and a small JSON client for it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float = 60.0) -> tuple[int, dict]:
    """(status, JSON answer) of a JSON POST."""
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def get(url: str, timeout: float = 5.0) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


class ServerProcess:
    """`with ServerProcess(["--checkpoint", run]) as server:` a running mt-serve at server.url;
    leaving the block sends SIGTERM and waits; `returncode` and `stderr` are kept."""

    def __init__(self, args: list[str], ready_within: float = 120.0, env: dict | None = None, prelude: str = ""):
        self.prelude = prelude  # Python run in the server process before it starts (the tests slow it down)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args, self.ready_within = args, ready_within
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
        self.env = {**os.environ, "PYTHONPATH": path, **(env or {})}
        self.returncode: int | None = None
        self.stderr = ""

    def __enter__(self) -> ServerProcess:
        command = [sys.executable, "-c", self.prelude + "\nfrom mt_transformer.cli import serve_main; serve_main()"]
        self._log = tempfile.TemporaryFile("w+", encoding="utf-8")  # a pipe would fill and stall the server
        self.process = subprocess.Popen(
            command + self.args + ["--host", "127.0.0.1", "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=self.env,
        )
        deadline = time.monotonic() + self.ready_within
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self.returncode, self.stderr = self.process.returncode, self._read_log()
                raise RuntimeError(f"mt-serve ended with {self.returncode}: {self.stderr.strip()}")
            try:
                if get(self.url + "/ready", timeout=1.0)[0] == 200:
                    return self
            except OSError:  # not listening yet
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"mt-serve was not ready within {self.ready_within} s: {self.stderr.strip()}")

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM, then the exit code (the process is killed if it outlives `timeout`)."""
        if self.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.returncode, self.stderr = self.process.returncode, self._read_log()
        return self.returncode

    def _read_log(self) -> str:
        self._log.seek(0)
        text = self._log.read()
        self._log.close()
        return text

    def __exit__(self, *exc) -> None:
        self.stop()

    def peak_rss_mb(self) -> float:
        """The process's peak resident memory so far (Linux: VmHWM)."""
        return self._status_mb("VmHWM:")

    def rss_mb(self) -> float:
        """The process's resident memory now (Linux: VmRSS)."""
        return self._status_mb("VmRSS:")

    def _status_mb(self, field: str) -> float:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) / 1024
        return float("nan")
