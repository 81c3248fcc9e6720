"""The check of an Argos package before mt-export writes it: argostranslate's own code, in a
process of its own and offline (its data directories in a scratch directory, no package index
to reach), installs the package and translates check lines; they must equal what our tokenizer
and the package's CTranslate2 model give at Argos's search settings, each line split into
sentences by the package's spaCy pipeline as Argos splits it.

Argos's settings (argostranslate 1.11): beam ARGOS_BEAM_SIZE (4), CTranslate2's length penalty
0.2, unknown pieces replaced by source tokens, the sentences of a paragraph translated as one
batch and their pieces decoded together, every "_" of the text turned into a space. So a line
differs from `mt-translate --engine ctranslate2` where our length penalty chooses another
hypothesis, where an unknown is filled differently, and where a translation holds "_": the check
counts those lines apart and reports the share equal to our engine's output as well.

    python -m mt_transformer.exchange.argos_check PACKAGE.argosmodel LINES.json OUT.json
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from mt_transformer.errors import UserError
from mt_transformer.files import write_text
from mt_transformer.special_tokens import UNK_ID

ARGOS_BEAM, ARGOS_LENGTH_PENALTY = 4, 0.2


def offline_environment(home: str, **settings: str) -> dict:
    """The environment of an Argos program whose data and caches live under `home`, splitting
    sentences with the package's spaCy pipeline, with no package index to reach (unless
    `settings` give ARGOS_PACKAGE_INDEX)."""
    return {
        **os.environ,
        "HOME": home,
        "XDG_DATA_HOME": os.path.join(home, "data"),
        "XDG_CACHE_HOME": os.path.join(home, "cache"),
        "XDG_CONFIG_HOME": os.path.join(home, "config"),
        "ARGOS_CHUNK_TYPE": "SPACY",
        "ARGOS_PACKAGE_INDEX": "http://127.0.0.1:9/",  # nothing to fetch: refused at once
        **settings,
    }


def argos_translations(package: str, lines: list[str], scratch: str) -> list[str]:
    """`lines` translated by argostranslate in a process of its own, offline."""
    source, result = os.path.join(scratch, "lines.json"), os.path.join(scratch, "argos.json")
    write_text(source, json.dumps(lines, ensure_ascii=False))
    home = os.path.join(scratch, "home")
    env = offline_environment(home, ARGOS_DEVICE_TYPE="cpu", ARGOS_BEAM_SIZE=str(ARGOS_BEAM))
    command = [sys.executable, "-m", "mt_transformer.exchange.argos_check", package, source, result]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise UserError(f"--format argos: argostranslate could not load or run the package ({last}); nothing written")
    with open(result, encoding="utf-8") as f:
        return json.load(f)


def ours_at_argos_settings(directory: str, tokenizer, lines: list[str]) -> tuple[list[str], list[bool]]:
    """Each line split by the package's spaCy pipeline, its sentences encoded by our tokenizer and
    searched by the package's model as Argos searches, their pieces decoded together by our
    tokenizer; and for each line, whether an unknown piece came out (Argos replaces it)."""
    import spacy

    from mt_transformer.decoding.ctranslate2_export import new_translator

    splitter = spacy.load(os.path.join(directory, "spacy"))
    splitter.add_pipe("sentencizer")
    translator = new_translator(os.path.join(directory, "model"), device="cpu", compute_type="auto")
    texts, unknowns = [], []
    for line in lines:
        sentences = [sentence.text for sentence in splitter(line).sents]
        sources = [tokenizer.src_pieces(ids) for ids in tokenizer.encode_src(sentences)]
        found = translator.translate_batch(
            sources, beam_size=ARGOS_BEAM, length_penalty=ARGOS_LENGTH_PENALTY, batch_type="tokens", max_batch_size=32
        )
        ids = [tokenizer.tgt.piece_to_id(piece) for result in found for piece in result.hypotheses[0]]
        texts.append(tokenizer.detokenize(ids, [])[0].strip())
        unknowns.append(UNK_ID in ids)
    return texts, unknowns


def check(package: str, directory: str, tokenizer, lines: list[str], scratch: str, ours_on_engine: list[str]) -> dict:
    """Argos's translations of `lines` against ours at its settings (every line must match but
    those with an unknown piece or a "_") and against `ours_on_engine`, our CTranslate2 engine's
    translations of them on the checkpoint."""
    theirs = argos_translations(package, lines, scratch)
    ours, unknowns = ours_at_argos_settings(directory, tokenizer, lines)
    for line, argos, own, unknown in zip(lines, theirs, ours, unknowns):
        if argos != own and not unknown and "_" not in own:
            raise UserError(
                f"--format argos: argostranslate translates {line!r} as {argos!r}, our tokenizer and the "
                f"package's model at its settings as {own!r}; nothing written"
            )
    return {
        "checked_lines": len(lines),
        "equal_at_argos_settings": sum(a == b for a, b in zip(theirs, ours)),
        "with_unknowns_or_underscores": sum(u or "_" in o for u, o in zip(unknowns, ours)),
        "equal_to_ctranslate2_engine": sum(a == b for a, b in zip(theirs, ours_on_engine)),
    }


def main(package: str, lines_file: str, out_file: str) -> None:
    from argostranslate import package as argos_package
    from argostranslate import translate

    argos_package.install_from_path(package)
    installed = argos_package.get_installed_packages()
    if len(installed) != 1:
        raise SystemExit(f"expected the one package installed, found {len(installed)}")
    with open(lines_file, encoding="utf-8") as f:
        lines = json.load(f)
    translations = [translate.translate(line, installed[0].from_code, installed[0].to_code) for line in lines]
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(translations, f, ensure_ascii=False)


if __name__ == "__main__":
    main(*sys.argv[1:4])
