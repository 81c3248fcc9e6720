"""The rules of data.clean that judge one pair at a time (config/cleaning.py names them): text
repair, then lengths, scripts, numbers, links, copies and boilerplate. Each rule returns the
reason a pair is dropped, or None; the first reason found is the one counted. What needs the
whole corpus (duplicates, lines repeated on one side) and language identification are
data/cleaning.py's and data/language_id.py's.
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass

from mt_transformer.config import CleanConfig
from mt_transformer.data.language_codes import NLLB

# control characters (tab aside: it becomes a space), zero-width characters and the soft hyphen
INVISIBLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u200b-\u200d\u2060\ufeff]")
MOSES_ESCAPE = re.compile(r"&(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+|[a-zA-Z]+);")
NUMBER, DIGIT = re.compile(r"\d+"), re.compile(r"\d")
LINK_HINT = re.compile(r"://|www\.|@", re.IGNORECASE)  # a quick look before the links are read
LINK = re.compile(r"(?:https?://|www\.)\S+|[\w.+-]+@[\w-]+\.[\w.-]+", re.IGNORECASE)
FOLD = re.compile(r"[\W\d_]+")  # what an untranslated copy may differ in: case, punctuation, digits
REPLACED = "\ufffd"  # what stands for bytes that were not UTF-8 (data/text.stream_lines), or mojibake

# the letters of each script, by the script part of an NLLB code (deu_Latn -> Latn); a script
# not listed counts every letter
SCRIPTS = {
    "Latn": "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff\u2c60-\u2c7f\ua720-\ua7ff",
    "Cyrl": "\u0400-\u052f\u1c80-\u1c8f\u2de0-\u2dff\ua640-\ua69f",
    "Grek": "\u0370-\u03ff\u1f00-\u1fff",
    "Arab": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "Hebr": "\u0590-\u05ff\ufb1d-\ufb4f",
    "Deva": "\u0900-\u097f\ua8e0-\ua8ff",
    "Hans": "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
    "Hant": "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
    "Jpan": "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
    "Hang": "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af",
    "Thai": "\u0e00-\u0e7f",
    "Armn": "\u0530-\u058f",
    "Geor": "\u10a0-\u10ff",
}
ANY_LETTER = re.compile(r"[^\W\d_]+")
UNSPACED = {"Hans", "Hant", "Jpan", "Thai", "Khmr", "Laoo", "Mymr", "Tibt"}  # scripts written without spaces


def script_of(language: str) -> str:
    """The script of `language` (two-letter or NLLB code), by its NLLB code (deu_Latn: Latn)."""
    code = NLLB.get(language, language)
    return code.split("_")[1] if "_" in code else "Latn"


def script_letters(language: str) -> re.Pattern:
    """What counts as a letter of `language`: its script's, where known."""
    script = script_of(language)
    return re.compile(f"[{SCRIPTS[script]}]+") if script in SCRIPTS else ANY_LETTER


def repair(text: str) -> str:
    """The text without control or zero-width characters, with HTML entities and Moses escapes
    read (&amp; -> &) and white space as single spaces (NFC again where anything was taken out)."""
    changed = False
    if INVISIBLE.search(text):
        text, changed = INVISIBLE.sub(" ", text), True
    if "&" in text and MOSES_ESCAPE.search(text):
        text, changed = html.unescape(text), True
    if changed:
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


@dataclass(frozen=True)
class PairRules:
    """data.clean's rules of one pair, with the letters of each side's script."""

    settings: CleanConfig
    src_letters: re.Pattern
    tgt_letters: re.Pattern
    boilerplate: tuple[re.Pattern, ...]
    spaced: bool  # both languages put spaces between words: lengths in words and characters compare

    @classmethod
    def of(cls, settings: CleanConfig, src_lang: str, tgt_lang: str) -> PairRules:
        patterns = tuple(re.compile(p) for p in settings.boilerplate)
        spaced = not {script_of(src_lang), script_of(tgt_lang)} & UNSPACED
        return cls(settings, script_letters(src_lang), script_letters(tgt_lang), patterns, spaced)

    def judge(self, src: str, tgt: str) -> str | None:
        """Why the (repaired) pair is dropped, or None."""
        if not src or not tgt:
            return "empty"
        if REPLACED in src or REPLACED in tgt:
            return "encoding"
        s = self.settings
        src_words, tgt_words = src.split(" "), tgt.split(" ")
        if s.max_words is not None and max(len(src_words), len(tgt_words)) > s.max_words:
            return "too_many_words"
        if s.max_word_chars is not None and max(map(len, src_words + tgt_words)) > s.max_word_chars:
            return "word_too_long"
        if (
            s.max_length_ratio is not None
            and self.spaced
            and _ratio_exceeded(src, tgt, src_words, tgt_words, s.max_length_ratio)
        ):
            return "length_ratio"
        if s.min_script_share is not None and (
            _share(src, self.src_letters) < s.min_script_share or _share(tgt, self.tgt_letters) < s.min_script_share
        ):
            return "script"
        if s.numbers and DIGIT.search(src) and DIGIT.search(tgt) and _numbers_differ(src, tgt):
            return "numbers"
        if s.urls and LINK_HINT.search(src + tgt) and sorted(LINK.findall(src)) != sorted(LINK.findall(tgt)):
            return "urls"
        if s.copy_words is not None and len(src_words) >= s.copy_words and _folded(src) == _folded(tgt):
            return "copy"
        if any(p.search(src) or p.search(tgt) for p in self.boilerplate):
            return "boilerplate"
        return None


def _ratio_exceeded(src: str, tgt: str, src_words: list[str], tgt_words: list[str], limit: float) -> bool:
    if max(len(src), len(tgt)) < 20:
        return False
    chars = max(len(src), len(tgt)) / min(len(src), len(tgt))
    words = max(len(src_words), len(tgt_words)) / min(len(src_words), len(tgt_words))
    return chars > limit or words > limit


def _share(text: str, letters: re.Pattern) -> float:
    """The share of the text's characters, spaces aside, that are letters of its script."""
    counted = len(text) - text.count(" ")
    return sum(map(len, letters.findall(text))) / counted if counted else 0.0


def _numbers_differ(src: str, tgt: str) -> bool:
    """Both sides hold digits, and not the same numbers (a side that spells them out passes)."""
    ours, theirs = NUMBER.findall(src), NUMBER.findall(tgt)
    return bool(ours and theirs) and sorted(ours) != sorted(theirs)


def _folded(text: str) -> str:
    return FOLD.sub("", text.casefold())
