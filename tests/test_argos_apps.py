"""Our Argos packages in the programs people run, from PyPI, offline on 127.0.0.1: argostranslate
installing them from a package index of our own, and LibreTranslate serving them (in its own
virtual environment: it pins flask, numpy < 2 and its own fork of argostranslate).

`make test-apps` makes that environment and runs these tests (MT_LIBRETRANSLATE_PYTHON names
its Python); `make test` leaves them out."""

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import zipfile

import pytest

from conftest import run_cli, tiny_config, write_config

pytestmark = pytest.mark.apps
pytest.importorskip("argostranslate", reason="argostranslate is not installed (pip install argostranslate)")

from mt_transformer import checkpoint  # noqa: E402
from mt_transformer.exchange import argos_check  # noqa: E402
from serve_process import free_port, get  # noqa: E402

PARAGRAPH = {"en": "The teacher bought three red apples. My sister sold two green books."}


@pytest.fixture(scope="module")
def packages(corpus, tmp_path_factory) -> dict:
    """en->de and de->en, each a tiny model trained here and exported with mt-export --format argos
    (LibreTranslate checks its index at boot unless two packages are installed)."""
    work = tmp_path_factory.mktemp("apps")
    found = {}
    for src, tgt in (("en", "de"), ("de", "en")):
        config = tiny_config(corpus, str(work / f"{src}_{tgt}"), train={"max_steps": 200, "valid_every": 200})
        config["data"].update(src_lang=src, tgt_lang=tgt, test=f"{corpus}/test")
        assert run_cli("mt-train", "--config", write_config(work / f"{src}_{tgt}.yaml", config)).returncode == 0
        path = str(work / "index" / f"{src}_{tgt}.argosmodel")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        result = run_cli("mt-export", "--checkpoint", str(work / f"{src}_{tgt}"), "--format", "argos", path)
        assert result.returncode == 0, result.stderr
        found[(src, tgt)] = {"path": path, "run": str(work / f"{src}_{tgt}")}
    return found


def expected(package: dict, lines: list[str], scratch) -> list[str]:
    """What the package must translate `lines` to: our tokenizer and its model at Argos's settings."""
    with zipfile.ZipFile(package["path"]) as archive:
        archive.extractall(scratch)
    (directory,) = [p for p in scratch.iterdir() if p.is_dir() and p.name.startswith("translate-")]
    tokenizer = checkpoint.load(package["run"], "cpu").tokenizer
    return argos_check.ours_at_argos_settings(str(directory), tokenizer, lines)[0]


@pytest.fixture
def index_server(packages):
    """An Argos package index on 127.0.0.1: index.json (each package's metadata and its link) and
    the packages, as a user publishes them."""
    directory = os.path.dirname(next(iter(packages.values()))["path"])
    port = free_port()
    entries = []
    for package in packages.values():
        with zipfile.ZipFile(package["path"]) as archive:
            (meta_name,) = [n for n in archive.namelist() if n.endswith("/metadata.json") and n.count("/") == 1]
            meta = json.loads(archive.read(meta_name))
        entries.append({**meta, "links": [f"http://127.0.0.1:{port}/{os.path.basename(package['path'])}"]})
    with open(os.path.join(directory, "index.json"), "w", encoding="utf-8") as f:
        json.dump(entries, f)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=directory)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{port}/"
    server.shutdown()


def offline_env(home, **extra) -> dict:
    return {
        **os.environ,
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "ARGOS_CHUNK_TYPE": "SPACY",
        "ARGOS_PACKAGE_INDEX": "http://127.0.0.1:9/",
        **extra,
    }


INSTALL_FROM_INDEX = """
import json, sys
from argostranslate import package, translate
package.update_package_index()
for available in package.get_available_packages():
    available.install()
installed = sorted((p.from_code, p.to_code) for p in package.get_installed_packages())
print(json.dumps({"installed": installed, "paragraph": translate.translate(sys.argv[1], "en", "de")}))
"""


def test_argostranslate_installs_our_packages_from_our_index_and_splits_offline(packages, index_server, tmp_path):
    env = offline_env(tmp_path / "home", ARGOS_PACKAGE_INDEX=index_server)
    done = subprocess.run(
        [sys.executable, "-c", INSTALL_FROM_INDEX, PARAGRAPH["en"]],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["installed"] == [["de", "en"], ["en", "de"]]
    sentences = ["The teacher bought three red apples.", "My sister sold two green books."]
    (whole, *apart) = expected(packages[("en", "de")], [PARAGRAPH["en"], *sentences], tmp_path / "x")
    assert result["paragraph"] == whole == " ".join(apart)


@pytest.fixture(scope="module")
def libretranslate(packages, tmp_path_factory):
    """LibreTranslate from PyPI on 127.0.0.1 with our two packages installed beforehand, offline."""
    python = os.environ.get("MT_LIBRETRANSLATE_PYTHON")
    found = python and os.path.isfile(python)
    if not found or subprocess.run([python, "-c", "import libretranslate, libretranslatepy, spacy"]).returncode:
        pytest.skip("LibreTranslate's environment is missing: make test-apps makes it (MT_LIBRETRANSLATE_PYTHON)")
    home = tmp_path_factory.mktemp("lt_home")
    packages_dir = home / "packages"
    for package in packages.values():
        with zipfile.ZipFile(package["path"]) as archive:
            archive.extractall(packages_dir)
    port = free_port()
    env = offline_env(home, ARGOS_PACKAGES_DIR=str(packages_dir))
    command = [python, "-m", "libretranslate.main", "--host", "127.0.0.1", "--port", str(port), "--load-only", "en,de"]
    log = open(home / "libretranslate.log", "w+")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if get(url + "/languages", timeout=2)[0] == 200:
                break
        except OSError:
            time.sleep(0.5)
    else:
        log.seek(0)
        process.kill()
        pytest.fail(f"LibreTranslate did not answer within 180 s:\n{log.read()[-3000:]}")
    yield {"url": url, "python": python}
    process.terminate()
    process.wait(timeout=30)
    shutil.rmtree(home, ignore_errors=True)


def lt_formatting(python: str, source: str, translation: str) -> str:
    """LibreTranslate's own touch-up of a translation (its final punctuation and case follow the source)."""
    code = (
        "import sys; from libretranslate.language import improve_translation_formatting as f; print(f(*sys.argv[1:3]))"
    )
    return subprocess.run([python, "-c", code, source, translation], capture_output=True, text=True).stdout.rstrip("\n")


def test_libretranslate_lists_and_serves_our_pair_as_json_form_and_client(libretranslate, packages, tmp_path):
    url, python = libretranslate["url"], libretranslate["python"]
    status, languages = get(url + "/languages")
    codes = {entry["code"]: set(entry["targets"]) for entry in languages}
    assert status == 200 and "de" in codes["en"] and "en" in codes["de"]
    text = "The teacher bought three red apples."
    want = lt_formatting(python, text, expected(packages[("en", "de")], [text], tmp_path)[0])
    body = json.dumps({"q": text, "source": "en", "target": "de"}).encode()
    request = urllib.request.Request(url + "/translate", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as answer:
        assert json.loads(answer.read())["translatedText"] == want
    form = urllib.parse.urlencode({"q": text, "source": "en", "target": "de"}).encode()
    with urllib.request.urlopen(urllib.request.Request(url + "/translate", form), timeout=60) as answer:
        assert json.loads(answer.read())["translatedText"] == want
    client = "import sys; from libretranslatepy import LibreTranslateAPI as A; "
    client += "print(A(sys.argv[1]).translate(sys.argv[2], 'en', 'de'))"
    done = subprocess.run([python, "-c", client, url + "/", text], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.rstrip("\n") == want
