"""Two-letter language codes (ISO 639-1, as LibreTranslate, Argos Translate and most corpora name
languages) and the codes of NLLB-200's language tokens (ISO 639-3 and script: deu_Latn). Where
ISO 639-1 names a macrolanguage, NLLB's code is the language it was trained on (ar: arb_Arab,
Modern Standard Arabic; fa: pes_Arab; ms: zsm_Latn; ...). zt and pb are LibreTranslate's codes
for Chinese in traditional script and for Brazilian Portuguese. M2M100's own codes are two-letter
codes already.
"""

from __future__ import annotations

# two-letter code -> NLLB code; where two codes name one NLLB language, the first is its own
NLLB = {
    "af": "afr_Latn", "ak": "aka_Latn", "am": "amh_Ethi", "ar": "arb_Arab", "as": "asm_Beng",
    "ay": "ayr_Latn", "az": "azj_Latn", "ba": "bak_Cyrl", "be": "bel_Cyrl", "bg": "bul_Cyrl",
    "bm": "bam_Latn", "bn": "ben_Beng", "bo": "bod_Tibt", "bs": "bos_Latn", "ca": "cat_Latn",
    "cs": "ces_Latn", "cy": "cym_Latn", "da": "dan_Latn", "de": "deu_Latn", "dz": "dzo_Tibt",
    "ee": "ewe_Latn", "el": "ell_Grek", "en": "eng_Latn", "eo": "epo_Latn", "es": "spa_Latn",
    "et": "est_Latn", "eu": "eus_Latn", "fa": "pes_Arab", "ff": "fuv_Latn", "fi": "fin_Latn",
    "fj": "fij_Latn", "fo": "fao_Latn", "fr": "fra_Latn", "ga": "gle_Latn", "gd": "gla_Latn",
    "gl": "glg_Latn", "gn": "grn_Latn", "gu": "guj_Gujr", "ha": "hau_Latn", "he": "heb_Hebr",
    "hi": "hin_Deva", "hr": "hrv_Latn", "ht": "hat_Latn", "hu": "hun_Latn", "hy": "hye_Armn",
    "id": "ind_Latn", "ig": "ibo_Latn", "is": "isl_Latn", "it": "ita_Latn", "ja": "jpn_Jpan",
    "jv": "jav_Latn", "ka": "kat_Geor", "kg": "kon_Latn", "ki": "kik_Latn", "kk": "kaz_Cyrl",
    "km": "khm_Khmr", "kn": "kan_Knda", "ko": "kor_Hang", "kr": "knc_Latn", "ks": "kas_Arab",
    "ku": "kmr_Latn", "ky": "kir_Cyrl", "lb": "ltz_Latn", "lg": "lug_Latn", "li": "lim_Latn",
    "ln": "lin_Latn", "lo": "lao_Laoo", "lt": "lit_Latn", "lv": "lvs_Latn", "mg": "plt_Latn",
    "mi": "mri_Latn", "mk": "mkd_Cyrl", "ml": "mal_Mlym", "mn": "khk_Cyrl", "mr": "mar_Deva",
    "ms": "zsm_Latn", "mt": "mlt_Latn", "my": "mya_Mymr", "nb": "nob_Latn", "ne": "npi_Deva",
    "nl": "nld_Latn", "nn": "nno_Latn", "no": "nob_Latn", "ny": "nya_Latn", "oc": "oci_Latn",
    "om": "gaz_Latn", "or": "ory_Orya", "pa": "pan_Guru", "pl": "pol_Latn", "ps": "pbt_Arab",
    "pt": "por_Latn", "pb": "por_Latn", "qu": "quy_Latn", "rn": "run_Latn", "ro": "ron_Latn",
    "ru": "rus_Cyrl", "rw": "kin_Latn", "sa": "san_Deva", "sc": "srd_Latn", "sd": "snd_Arab",
    "sg": "sag_Latn", "si": "sin_Sinh", "sk": "slk_Latn", "sl": "slv_Latn", "sm": "smo_Latn",
    "sn": "sna_Latn", "so": "som_Latn", "sq": "als_Latn", "sr": "srp_Cyrl", "ss": "ssw_Latn",
    "st": "sot_Latn", "su": "sun_Latn", "sv": "swe_Latn", "sw": "swh_Latn", "ta": "tam_Taml",
    "te": "tel_Telu", "tg": "tgk_Cyrl", "th": "tha_Thai", "ti": "tir_Ethi", "tk": "tuk_Latn",
    "tl": "tgl_Latn", "tn": "tsn_Latn", "tr": "tur_Latn", "ts": "tso_Latn", "tt": "tat_Cyrl",
    "tw": "twi_Latn", "ug": "uig_Arab", "uk": "ukr_Cyrl", "ur": "urd_Arab", "uz": "uzn_Latn",
    "vi": "vie_Latn", "wo": "wol_Latn", "xh": "xho_Latn", "yi": "ydd_Hebr", "yo": "yor_Latn",
    "zh": "zho_Hans", "zt": "zho_Hant", "zu": "zul_Latn",
}  # fmt: skip

TWO_LETTER = {}  # NLLB code -> its own two-letter code
for _short, _code in NLLB.items():
    TWO_LETTER.setdefault(_code, _short)


def model_code(code: str, languages) -> str | None:
    """The model's code for `code`: itself when the model has it, else the NLLB code of a
    two-letter one; None when the model has neither."""
    if code in languages:
        return code
    return NLLB.get(code) if NLLB.get(code) in languages else None


def public_code(code: str) -> str:
    """The code a server lists a model's language under: its two-letter code where it has one."""
    return TWO_LETTER.get(code, code)
