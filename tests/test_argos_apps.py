"""Our Argos packages in the programs people run, from PyPI, offline on 127.0.0.1: argostranslate
installing them from a package index of our own, and LibreTranslate serving them (in its own
virtual environment: it pins flask, numpy < 2 and its own fork of argostranslate).

`make test-apps` makes that environment and runs these tests (MT_LIBRETRANSLATE_PYTHON names
its Python); `make test` leaves them out."""

import contextlib
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
    return argos_check.offline_environment(str(home), **extra)


def argos_command(name: str) -> list[str]:
    """An argostranslate command as installed beside this Python (argospm, argos-translate)."""
    beside = os.path.join(os.path.dirname(sys.executable), name)
    found = beside if os.path.isfile(beside) else shutil.which(name)
    if not found:
        pytest.skip(f"{name} is not installed")
    return [found]


def test_argospm_installs_our_packages_from_our_index_and_argos_translate_splits_offline(
    packages, index_server, tmp_path
):
    env = offline_env(tmp_path / "home", ARGOS_PACKAGE_INDEX=index_server)

    def run(*command):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    run(*argos_command("argospm"), "update")
    assert "translate-en_de" in run(*argos_command("argospm"), "search")
    for name in ("translate-en_de", "translate-de_en"):
        run(*argos_command("argospm"), "install", name)
    assert sorted(run(*argos_command("argospm"), "list").split()) == ["translate-de_en", "translate-en_de"]
    paragraph = run(*argos_command("argos-translate"), "--from-lang", "en", "--to-lang", "de", PARAGRAPH["en"])
    sentences = ["The teacher bought three red apples.", "My sister sold two green books."]
    (whole, *apart) = expected(packages[("en", "de")], [PARAGRAPH["en"], *sentences], tmp_path / "x")
    assert paragraph.rstrip("\n") == whole == " ".join(apart)


def lt_python() -> str:
    python = os.environ.get("MT_LIBRETRANSLATE_PYTHON")
    found = python and os.path.isfile(python)
    if not found or subprocess.run([python, "-c", "import libretranslate, libretranslatepy, spacy"]).returncode:
        pytest.skip("LibreTranslate's environment is missing: make test-apps makes it (MT_LIBRETRANSLATE_PYTHON)")
    return python


@contextlib.contextmanager
def running_libretranslate(python: str, installed: list[str], home):
    """LibreTranslate from PyPI on 127.0.0.1, offline (no package index to reach), with these
    packages installed beforehand and `--load-only en,de`; yields its URL and how long it took to
    answer."""
    packages_dir = home / "packages"
    for path in installed:
        with zipfile.ZipFile(path) as archive:
            archive.extractall(packages_dir)
    port = free_port()
    env = offline_env(home, ARGOS_PACKAGES_DIR=str(packages_dir))
    command = [python, "-m", "libretranslate.main", "--host", "127.0.0.1", "--port", str(port), "--load-only", "en,de"]
    log = open(home / "libretranslate.log", "w+")
    began = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    while time.monotonic() < began + 180 and process.poll() is None:
        try:
            if get(url + "/languages", timeout=2)[0] == 200:
                break
        except OSError:
            time.sleep(0.5)
    else:
        log.seek(0)
        process.kill()
        pytest.fail(f"LibreTranslate did not answer within 180 s:\n{log.read()[-3000:]}")
    try:
        yield url, time.monotonic() - began
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def libretranslate(packages, tmp_path_factory):
    """LibreTranslate with our two packages (a pair both ways)."""
    python = lt_python()
    home = tmp_path_factory.mktemp("lt_home")
    with running_libretranslate(python, [p["path"] for p in packages.values()], home) as (url, _):
        yield {"url": url, "python": python}
    shutil.rmtree(home, ignore_errors=True)


def test_libretranslate_with_one_package_starts_offline_at_once(packages, tmp_path):
    """With one package and --load-only, its refresh of an unreachable index fails before any
    download, so it serves within seconds (without --load-only it would retry MiniSBD downloads
    for minutes)."""
    with running_libretranslate(lt_python(), [packages[("en", "de")]["path"]], tmp_path / "home") as (url, seconds):
        assert seconds < 90
        codes = {entry["code"]: set(entry["targets"]) for entry in get(url + "/languages")[1]}
        assert "de" in codes["en"] and "en" not in codes.get("de", set())


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
