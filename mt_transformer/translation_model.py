"""The Python API: a model loaded once, to translate, score and look inside.

    import mt_transformer as mt

    m = mt.load("runs/demo")                        # a run, a checkpoint, an mt-export or mt-import directory
    m.translate("I bought 23 red apples on March 5.")
    m.translate(["One line.", "", "Another."])      # a list gives a list; empty lines stay empty
    m.translate("A line.", n_best=4)                # hypotheses with their scores
    m.score("A line.", "Eine Zeile.")               # log P(translation | source), as mt-score
    bertviz.model_view(**m.attention("A line."))    # every head of every layer

It is the translator mt-translate uses (decoding/translator.py), with the same settings.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

from mt_transformer.config import DecodeConfig
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.runtime import is_export, settings_reason
from mt_transformer.decoding.translator import Translation, Translator
from mt_transformer.errors import UserError

DECODE_SETTINGS = tuple(f.name for f in dataclasses.fields(DecodeConfig))


class TranslationModel:
    """A loaded model (or ensemble, or CTranslate2 export) with its tokenizer and decode settings.
    A call that asks for what its engine lacks (attention, sampling or bf16 where CTranslate2
    runs) runs on our engine, loaded then from the same checkpoint."""

    def __init__(self, translator: Translator, load_torch: Callable[[], Translator] | None = None):
        self.translator = translator
        self._load_torch, self._torch = load_torch, translator if translator.model is not None else None

    @property
    def engine(self) -> str:
        """ "ctranslate2" or "torch": the engine that runs calls with the loaded settings."""
        return self.translator.runtime.engine

    def torch_translator(self, why: str) -> Translator:
        """Our engine's translator of the same checkpoint(s), loaded on first use."""
        if self._torch is None:
            if self._load_torch is None:
                raise UserError(f"{why}: needs our engine, and this model is a CTranslate2 export")
            self._torch = self._load_torch()
        return self._torch

    @property
    def settings(self) -> DecodeConfig:
        """The decode settings in effect (beam_size, alpha, precision, ...)."""
        return self.translator.decode

    def translate(
        self, text: str | Sequence[str], n_best: int | None = None, **settings
    ) -> str | list[str] | list[Translation] | list[list[Translation]]:
        """The translation of a string, or of each string of a list. With n_best: per input, up to
        n_best Translation objects (text, score, log_prob, tokens), best first. `settings`
        override the decode settings for this call (beam_size=1, alpha=1.0, sampling=True, ...)."""
        lines = [text] if isinstance(text, str) else list(text)
        translator = self._with(n_best=n_best, **settings)
        results = (translator.with_exact_scores() if n_best is not None else translator)(lines)
        found = [r if n_best is not None else r[0].text for r in results]
        return found[0] if isinstance(text, str) else found

    def score(self, src: str | Sequence[str], tgt: str | Sequence[str]) -> float | list[float]:
        """log P(tgt | src) under the model: the sum over tgt's subwords and the EOS after them."""
        from mt_transformer.decoding.scoring import score_lines

        one = isinstance(src, str)
        sources, targets = ([src], [tgt]) if one else (list(src), list(tgt))
        if isinstance(tgt, str) != one or len(sources) != len(targets):
            raise UserError("score: give one source and one translation, or two lists of equal length")
        scores = [s.log_prob for s in score_lines(self.translator, sources, targets)]
        return scores[0] if one else scores

    def attention(self, src: str, tgt: str | None = None) -> dict:
        """Every attention weight for one sentence and its translation (tgt, else the model's
        own), as bertviz's model_view and head_view take them: `encoder_attention`,
        `decoder_attention` and `cross_attention`, each a tuple of one tensor per layer, (1,
        heads, query positions, key positions); `encoder_tokens` (the source pieces and </s>)
        and `decoder_tokens` (<s> and the translation's pieces: the decoder's inputs)."""
        from mt_transformer.decoding.attention_maps import attention_maps
        from mt_transformer.decoding.ensemble import Ensemble

        t = self.torch_translator("attention")
        if isinstance(t.model, Ensemble):
            raise UserError("attention: needs one model, not an ensemble")
        src_ids = t.source_ids([src])[0]
        tgt_ids = t([src])[0][0].tokens if tgt is None else t.target_ids([tgt])[0]
        maps = attention_maps(t.model, src_ids, tgt_ids, t.config.model.source_tag_after_eos)
        return {
            "encoder_attention": tuple(maps.encoder),
            "decoder_attention": tuple(maps.decoder),
            "cross_attention": tuple(maps.cross),
            "encoder_tokens": t.tokenizer.src_pieces(src_ids) + ["</s>"],
            "decoder_tokens": ["<s>"] + t.tokenizer.tgt_pieces(tgt_ids),
        }

    def _with(self, **settings) -> Translator:
        changed = {k: v for k, v in settings.items() if v is not None}
        _check_names(changed)
        translator = self.translator
        if translator.model is None and self._load_torch is not None:
            reason = settings_reason(translator.device, {"precision": translator.decode.precision, **changed})
            if reason is not None:
                translator = self.torch_translator(reason)
        return translator.with_settings(**changed) if changed else translator

    def __repr__(self) -> str:
        d = self.settings
        settings = f"beam_size={d.beam_size}, alpha={d.alpha}, precision={d.precision!r}"
        return f"TranslationModel(engine={self.engine!r}, {settings})"


def load(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    *,
    engine: str = "auto",
    device: str = "auto",
    tgt_lang: str | None = None,
    src_lang: str | None = None,
    compute_type: str = "default",
    threads: int = 0,
    ensemble_mode: str = "logprob",
    worker_threads: int = 1,
    **settings,
) -> TranslationModel:
    """Load a model to translate with, as mt-translate does.

    path: a run directory (its best checkpoint), a checkpoint directory, an mt-import result, an
    mt-export --format ctranslate2 directory (run by CTranslate2), or a list of checkpoints (an
    ensemble). engine: "auto" (the default: CTranslate2 on a CPU where it has every setting,
    through the checkpoint's conversion, else ours; decoding/runtime.py), "torch" or
    "ctranslate2".
    device: "auto", "cpu" or "cuda[:N]". tgt_lang: the language to write, for a model trained
    with target tags or an imported NLLB or M2M100 model; src_lang: the latter's input language.
    threads, worker_threads: CTranslate2's CPU threads (0: torch's), and each worker's (as
    mt-translate --threads, --worker-threads).
    settings: decode settings (beam_size, alpha, n_best, max_tokens,
    precision, sampling, topk, topp, temperature, seed, no_repeat_ngram, ...), else the
    checkpoint's."""
    paths = [os.fspath(path)] if isinstance(path, (str, os.PathLike)) else [os.fspath(p) for p in path]
    _check_names(settings)
    options = (device, compute_type, threads, ensemble_mode)
    named = {"tgt_lang": tgt_lang, "src_lang": src_lang, "worker_threads": worker_threads}
    translator = open_translator(paths, engine, *options, **named, **settings)
    load_torch = None
    if not is_export(paths[0]):

        def load_torch():
            return open_translator(paths, "torch", *options, **named, **settings)

    return TranslationModel(translator, load_torch)


def _check_names(settings: dict) -> None:
    for name in settings:
        if name not in DECODE_SETTINGS:
            raise UserError(f"{name}: not a decode setting; these are: {', '.join(DECODE_SETTINGS)}")
