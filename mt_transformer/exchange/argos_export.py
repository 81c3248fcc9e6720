"""Export to an Argos Translate package: a `.argosmodel` file that argostranslate (its desktop and
command-line apps, `argospm`) and LibreTranslate install.

    OUT.argosmodel      a zip of one directory, translate-SRC_TGT-VERSION/:
        metadata.json         the codes, names and version, the argostranslate it was checked with
        model/                the CTranslate2 export (decoding/ctranslate2_export.py), int8 by default
        sentencepiece.model   our tokenizer: Argos encodes the source and decodes the output with it,
                              so the pieces it gives the model are the ones we trained on
        spacy/                a blank spaCy pipeline of the source language: with
                              ARGOS_CHUNK_TYPE=SPACY, Argos adds its rule-based sentencizer to it
                              and splits paragraphs into sentences offline
        README.md             what the model is, and its license

Before the file is written, argostranslate's own code installs the package into a scratch
directory and translates check lines, offline, which must come out as our tokenizer and
CTranslate2 give them at Argos's search settings (exchange/argos_check.py).

A model with target tags (`data.target_tags`) reads `<2xx>` before each source, which Argos cannot
write (it prefixes only the output): it becomes one package per language pair, OUT.SRC_TGT.argosmodel,
each model adding its tag itself. What a package cannot carry: separate source and target
sentencepiece models, constraints, ensembles.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

from mt_transformer.data.tokenizer import JOINT_FILE
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, write_text
from mt_transformer.outputs import check_output

# the names Argos and LibreTranslate show; other codes need --from-name / --to-name
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "eo": "Esperanto", "es": "Spanish", "et": "Estonian", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hu": "Hungarian",
    "id": "Indonesian", "it": "Italian", "ja": "Japanese", "ko": "Korean", "lt": "Lithuanian",
    "lv": "Latvian", "nb": "Norwegian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sv": "Swedish", "th": "Thai",
    "tr": "Turkish", "uk": "Ukrainian", "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}  # fmt: skip
CHECK_LINES = 200  # lines of the test (or valid) split that Argos translates before the file is written


def argos_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("argostranslate")
    except PackageNotFoundError:
        raise UserError(
            "--format argos checks the package with argostranslate, which is not installed: "
            "pip install argostranslate (after the CPU build of torch)"
        ) from None


def refuse_what_argos_cannot_carry(loaded) -> None:
    tokenizer = loaded.tokenizer
    if not tokenizer.joint or tokenizer.files[0] != JOINT_FILE:  # a joint model (with its folding copy)
        raise UserError(
            "--format argos: a package holds one sentencepiece model for both languages, and this "
            "checkpoint has two (data.joint_vocab: false)"
        )


def pairs(loaded) -> list[tuple[object, str | None]]:
    """The language pairs a model translates, one package each: (its corpus config, the target
    tag its sources begin with, or None). A model with target tags reads `<2xx>` before every
    source, which Argos cannot write (it prefixes only the output): each of its packages holds a
    model that adds its tag itself (ctranslate2_export.build_spec's source_prefix)."""
    data = loaded.config.data
    found = {}
    for corpus in data.corpus_list():
        prefix = corpus.source_tags(data.target_tags)[0] if data.target_tags else None
        found.setdefault((corpus.src_lang, corpus.tgt_lang), (corpus, prefix))
    return list(found.values())


def metadata(corpus, from_name: str | None, to_name: str | None, version: str, license: str) -> dict:
    names = {}
    for side, code, given in (("from", corpus.src_lang, from_name), ("to", corpus.tgt_lang, to_name)):
        names[side] = given or LANGUAGE_NAMES.get(code)
        if not names[side]:
            raise UserError(f"--{side}-name: no name known for the language code {code!r}; give one")
    return {
        "package_version": version,
        "argos_version": argos_version(),
        "from_code": corpus.src_lang,
        "from_name": names["from"],
        "to_code": corpus.tgt_lang,
        "to_name": names["to"],
        "type": "translate",
        "links": [],
        "license": license,
        "source": "mt_transformer",
    }


def readme(loaded, meta: dict, quantization: str | None) -> str:
    m = loaded.config.model
    return (
        f"# {meta['from_name']} -> {meta['to_name']}\n\n"
        f"A Transformer ({m.encoder_layers}+{m.decoder_layers} layers, d_model {m.d_model}, FFN {m.d_ff}, "
        f"{loaded.tokenizer.src_vocab_size:,} sentencepiece pieces) trained with mt_transformer for "
        f"{loaded.step:,} updates; CTranslate2 weights in {quantization or 'float32'}.\n\n"
        f"License: {meta['license']}\n"
    )


def spacy_pipeline(language: str, directory: str) -> None:
    """A blank spaCy pipeline of `language` (or spaCy's multi-language one), which Argos loads and
    gives its sentencizer: sentence splitting without a model to download."""
    try:
        import spacy
    except ImportError:
        raise UserError("--format argos: spaCy is not installed (argostranslate needs it): pip install spacy") from None
    try:
        nlp = spacy.blank(language)
    except ImportError:  # spaCy has no rules for this language
        nlp = spacy.blank("xx")
    nlp.to_disk(directory)


def build(loaded, directory: str, meta: dict, quantization: str | None, prefix: str | None) -> None:
    """The package's directory: CTranslate2 model (only what CTranslate2 reads), tokenizer,
    sentence splitter, metadata, README."""
    from mt_transformer.decoding import ctranslate2_export

    os.makedirs(directory)
    model = os.path.join(directory, "model")
    ctranslate2_export.export(loaded, model, quantization, source_prefix=prefix, model_only=True)
    tokenizer = loaded.tokenizer
    # the source's model: it encodes the source (case-folded under data.fold_source_case) and its
    # pieces, the joint ones, decode the target
    shutil.copyfile(tokenizer.path(tokenizer.model_files[0]), os.path.join(directory, "sentencepiece.model"))
    spacy_pipeline(meta["from_code"], os.path.join(directory, "spacy"))
    write_text(os.path.join(directory, "metadata.json"), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    write_text(os.path.join(directory, "README.md"), readme(loaded, meta, quantization))


def zip_directory(directory: str, path: str) -> None:
    """`directory` as a zip of one top-level directory of its name (what Argos extracts)."""
    parent = os.path.dirname(directory)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, _, files in sorted(os.walk(directory)):
            for name in sorted(files):
                full = os.path.join(root, name)
                archive.write(full, os.path.relpath(full, parent))


def check_lines(corpus, given: str | None) -> list[str]:
    """The source lines Argos translates in the check: --check-src, or the first CHECK_LINES of the
    corpus's test (or valid) split where it is a local text file."""
    from mt_transformer.data.text import read_lines

    candidates = [given] if given else [f"{p}.{corpus.src_lang}" for p in (corpus.test, corpus.valid) if p]
    for path in candidates:
        if os.path.isfile(path):
            return [line for line in read_lines(path) if line.strip()][:CHECK_LINES]
    where = given or "the checkpoint's test and valid splits"
    raise UserError(f"--check-src: no source lines to check the package with ({where}: not a local file)")


@dataclass
class PackageOptions:
    """What mt-export's options say of the package."""

    checkpoint: str  # where the model was loaded from
    # lines and the language to write (None: the model's one) -> mt-translate --engine ctranslate2's
    # translations at the package's quantization, which the check reports Argos's against
    translate: Callable[[list[str], str | None], list[str]]
    quantization: str | None = "int8"
    from_name: str | None = None  # default: LANGUAGE_NAMES
    to_name: str | None = None
    version: str = "1.0"
    license: str = "unspecified"
    check_src: str | None = None  # default: the checkpoint's test (or valid) source lines
    force: bool = False  # replace a file at a package's path that is no package of ours


def package_metadata(path: str) -> dict | None:
    """The metadata of the Argos package at `path` (a zip file holding one directory with a
    metadata.json), or None where it is no Argos package."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/metadata.json")]
            found = json.loads(archive.read(names[0])) if len(names) == 1 else None
    except (OSError, ValueError, RecursionError, zipfile.BadZipFile):
        return None
    return found if isinstance(found, dict) else None


def is_package(path: str) -> bool:
    return package_metadata(path) is not None


def is_our_package(path: str) -> bool:
    """Whether `path` is an Argos package mt-export wrote (its metadata's source is ours)."""
    return (package_metadata(path) or {}).get("source") == "mt_transformer"


def check_package_path(path: str, inputs: list[str], force: bool) -> None:
    """Refuse a package path where writing would lose what the user has (outputs.check_output): an
    earlier package of ours there is replaced, another Argos package only with `force`."""
    check_output(path, "mt-export", inputs, force or is_our_package(path), file_format=is_package)


def package_paths(out_path: str, found: list) -> list[str]:
    """OUT.argosmodel for a model of one pair; OUT.SRC_TGT.argosmodel for each of several."""
    if len(found) == 1:
        return [out_path]
    stem = out_path[: -len(".argosmodel")] if out_path.endswith(".argosmodel") else out_path
    return [f"{stem}.{corpus.src_lang}_{corpus.tgt_lang}.argosmodel" for corpus, _ in found]


def export(loaded, out_path: str, options: PackageOptions) -> list[dict]:
    """Write the Argos package of each language pair of a checkpoint.LoadedModel, once
    argostranslate has loaded it and translated the check lines; returns, for each, its path,
    metadata and the check's result."""
    from mt_transformer.exchange import argos_check

    refuse_what_argos_cannot_carry(loaded)
    found = pairs(loaded)
    if options.check_src and len(found) > 1:
        raise UserError("--check-src: this model translates several pairs; each is checked on its own test split")
    jobs, inputs = [], [options.checkpoint, *([options.check_src] if options.check_src else [])]
    for (corpus, prefix), path in zip(found, package_paths(out_path, found)):
        check_package_path(path, inputs, options.force)
        names = (options.from_name, options.to_name) if len(found) == 1 else (None, None)
        meta = metadata(corpus, *names, options.version, options.license)
        jobs.append((corpus, prefix, path, meta, check_lines(corpus, options.check_src)))
    reports = []
    for corpus, prefix, path, meta, lines in jobs:
        name = f"translate-{meta['from_code']}_{meta['to_code']}-{options.version.replace('.', '_')}"
        with tempfile.TemporaryDirectory() as scratch:
            directory = os.path.join(scratch, name)
            build(loaded, directory, meta, options.quantization, prefix)
            package = os.path.join(scratch, name + ".argosmodel")
            zip_directory(directory, package)
            ours = options.translate(lines, corpus.tgt_lang if prefix else None)
            report = argos_check.check(package, directory, loaded.tokenizer, lines, scratch, ours)
            with atomic_path(path) as tmp:
                shutil.copyfile(package, tmp)
        reports.append({"path": path, "metadata": meta, **report})
    return reports
