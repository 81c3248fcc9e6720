"""Export to an Argos Translate package: a `.argosmodel` file that argostranslate (its desktop and
command-line apps, `argospm`) and LibreTranslate install.

    OUT.argosmodel      a zip of one directory, translate-SRC_TGT-VERSION/:
        metadata.json         the codes, names and version, the argostranslate it was checked with
        model/                the CTranslate2 export (exchange/ctranslate2_export.py), int8 by default
        sentencepiece.model   our tokenizer: Argos encodes the source and decodes the output with it,
                              so the pieces it gives the model are the ones we trained on
        spacy/                a blank spaCy pipeline of the source language: with
                              ARGOS_CHUNK_TYPE=SPACY, Argos adds its rule-based sentencizer to it
                              and splits paragraphs into sentences offline
        README.md             what the model is, and its license

Before the file is written, argostranslate's own code installs the package into a scratch
directory and translates check lines, offline, which must come out as our tokenizer and
CTranslate2 give them at Argos's search settings (exchange/argos_check.py).

What a package cannot carry: a source-side target tag (Argos puts a language token only before
the output), separate source and target sentencepiece models, constraints, ensembles.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from dataclasses import dataclass

from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, write_text

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
    if not tokenizer.joint or len(tokenizer.model_files) != 1:
        raise UserError(
            "--format argos: a package holds one sentencepiece model for both languages, and this "
            "checkpoint has two (data.joint_vocab: false)"
        )
    if tokenizer.tags:
        raise UserError(
            "--format argos: this model reads its target language as a tag before the source "
            f"({', '.join(sorted(tokenizer.tags))}); Argos puts a language token only before the output"
        )


def metadata(loaded, from_name: str | None, to_name: str | None, version: str, license: str) -> dict:
    data = loaded.config.data
    names = {}
    for side, code, given in (("from", data.src_lang, from_name), ("to", data.tgt_lang, to_name)):
        names[side] = given or LANGUAGE_NAMES.get(code)
        if not names[side]:
            raise UserError(f"--{side}-name: no name known for the language code {code!r}; give one")
    return {
        "package_version": version,
        "argos_version": argos_version(),
        "from_code": data.src_lang,
        "from_name": names["from"],
        "to_code": data.tgt_lang,
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


def build(loaded, directory: str, meta: dict, quantization: str | None) -> None:
    """The package's directory: CTranslate2 model, tokenizer, sentence splitter, metadata, README."""
    from mt_transformer.exchange import ctranslate2_export

    os.makedirs(directory)
    ctranslate2_export.export(loaded, os.path.join(directory, "model"), quantization)
    tokenizer = loaded.tokenizer
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


def check_lines(loaded, given: str | None) -> list[str]:
    """The source lines Argos translates in the check: --check-src, or the first CHECK_LINES of the
    checkpoint's test (or valid) split where it is a local text file."""
    from mt_transformer.data.text import read_lines

    data = loaded.config.data
    candidates = [given] if given else [f"{p}.{data.src_lang}" for p in (data.test, data.valid) if p]
    for path in candidates:
        if os.path.isfile(path):
            return [line for line in read_lines(path) if line.strip()][:CHECK_LINES]
    where = given or "the checkpoint's test and valid splits"
    raise UserError(f"--check-src: no source lines to check the package with ({where}: not a local file)")


@dataclass
class PackageOptions:
    """What mt-export's options say of the package."""

    quantization: str | None = "int8"
    from_name: str | None = None  # default: LANGUAGE_NAMES
    to_name: str | None = None
    version: str = "1.0"
    license: str = "unspecified"
    check_src: str | None = None  # default: the checkpoint's test (or valid) source lines


def export(loaded, out_path: str, options: PackageOptions) -> dict:
    """Write the Argos package of a checkpoint.LoadedModel to out_path, once argostranslate has
    loaded it and translated the check lines; returns its metadata and the check's result."""
    from mt_transformer.exchange import argos_check

    refuse_what_argos_cannot_carry(loaded)
    meta = metadata(loaded, options.from_name, options.to_name, options.version, options.license)
    lines = check_lines(loaded, options.check_src)
    name = f"translate-{meta['from_code']}_{meta['to_code']}-{options.version.replace('.', '_')}"
    with tempfile.TemporaryDirectory() as scratch:
        directory = os.path.join(scratch, name)
        build(loaded, directory, meta, options.quantization)
        package = os.path.join(scratch, name + ".argosmodel")
        zip_directory(directory, package)
        report = argos_check.check(package, directory, loaded.tokenizer, lines, scratch)
        with atomic_path(out_path) as tmp:
            shutil.copyfile(package, tmp)
    return {"metadata": meta, **report}
