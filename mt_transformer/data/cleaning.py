"""data.clean as a stage of the data flow: a corpus's training pairs, as read, become the text
pairs the tokenizer and the model learn from, less those a rule drops, with a report of what
each rule dropped. Exact and deterministic; memory grows with the corpus by 38 bytes a pair (a
reason, three 8-byte hashes, two lengths, a word-translation score, a flag), 42 with model
scoring; the text is read once, in batches, and its repaired pairs kept on disk for the later
passes.

The passes over the pairs: (1) repair each pair and judge it (data/clean_rules.py), then the
language of what is left (data/language_id.py), keeping hashes of the repaired pair and sides;
(2) from the hashes and lengths, sides far longer than their corpus's median, a side's line
repeated with more than data.clean.max_repeats partners, duplicate pairs beyond the first;
(3) with data.clean.lexical, word translation learned from the pairs left (data/lexical.py) and
the pairs whose words translate each other worst dropped; (4) with data.clean.scorers, the cost
of each pair left (its models' cross-entropy), the worst data.clean.score_drop of them dropped;
then pairs whose target a better-scored (else an earlier) pair has; (5) the kept pairs written,
and three examples of each reason taken.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np
import xxhash

from mt_transformer.config import CleanConfig, CorpusConfig, DataConfig, corpus_keys
from mt_transformer.data.cache import CACHE_WRITER, cache_directory, cache_key, split_source
from mt_transformer.data.clean_rules import PairRules, repair
from mt_transformer.data.corpus import pairs_to_clean
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path, read_json, write_text
from mt_transformer.outputs import atomic_dir, check_output

log = logging.getLogger(__name__)

# why a pair is dropped, in the order the rules ask; 0: kept
REASONS = (
    "kept",
    "empty",
    "encoding",
    "too_many_words",
    "word_too_long",
    "length_ratio",
    "script",
    "numbers",
    "urls",
    "copy",
    "boilerplate",
    "language",
    "long",
    "repeated",
    "duplicate_pair",
    "lexical",
    "score",
    "duplicate_target",
)
CODE = {reason: code for code, reason in enumerate(REASONS)}
BATCH = 10_000
LEXICAL_PAIRS = 1_000  # the fewest open pairs data.clean.lexical learns word translations from
# a scorer's answer: per pair of a batch (sources, targets), its cost, lower for a better translation
Scorer = Callable[[list[str], list[str]], np.ndarray]
EXAMPLES = 3
REPORT = "report.json"  # in a cleaned corpus's cache directory
REPORT_FILE = "cleaning.json"  # in the run directory: each corpus's report, by its key


def _hash(text: str) -> int:
    return xxhash.xxh3_64_intdigest(text.encode("utf-8"))


def _repaired(pairs, settings: CleanConfig) -> Iterator[list[tuple[str, str]]]:
    """The pairs in batches, repaired where data.clean.repair is on."""
    for batch in pairs.iter(batch_size=BATCH):
        rows = zip(batch["src"], batch["tgt"])
        yield [(repair(s), repair(t)) for s, t in rows] if settings.repair else list(rows)


class _Spool:
    """The repaired pairs as pass 1 read them, in two files of a temporary directory, for the
    later passes to read back: the corpus is read, normalized and repaired once. A line holds no
    line feed (data/text.normalize)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.paths = (os.path.join(directory, "src"), os.path.join(directory, "tgt"))

    def write(self, pairs, settings: CleanConfig) -> Iterator[list[tuple[str, str]]]:
        """The repaired pairs in batches, each batch kept as it goes by."""
        with (
            open(self.paths[0], "w", encoding="utf-8", newline="\n") as src,
            open(self.paths[1], "w", encoding="utf-8", newline="\n") as tgt,
        ):
            for batch in _repaired(pairs, settings):
                src.write("".join(s + "\n" for s, _ in batch))
                tgt.write("".join(t + "\n" for _, t in batch))
                yield batch

    def batches(self) -> Iterator[list[tuple[str, str]]]:
        with (
            open(self.paths[0], encoding="utf-8", newline="\n") as src,
            open(self.paths[1], encoding="utf-8", newline="\n") as tgt,
        ):
            rows = zip((line[:-1] for line in src), (line[:-1] for line in tgt))
            while batch := list(islice(rows, BATCH)):
                yield batch


def _judge(pairs, settings: CleanConfig, src_lang: str, tgt_lang: str, spool: _Spool):
    """Pass 1: per pair, its reason code, the hashes of the pair, its source and its target, and
    the sides' lengths in characters; the repaired pairs kept in `spool`."""
    rules = PairRules.of(settings, src_lang, tgt_lang)
    codes, hashes, lengths = [], [], []
    for batch in spool.write(pairs, settings):
        found = [CODE[r] if (r := rules.judge(s, t)) else 0 for s, t in batch]
        if settings.language_id is not None:
            _judge_languages(batch, found, settings.language_id, src_lang, tgt_lang)
        codes.append(np.array(found, dtype=np.uint8))
        hashes.append(np.array([(_hash(s + "\t" + t), _hash(s), _hash(t)) for s, t in batch], dtype=np.uint64))
        lengths.append(np.array([(len(s), len(t)) for s, t in batch], dtype=np.uint32))
    if not codes:
        return np.zeros(0, np.uint8), np.zeros((0, 3), np.uint64), np.zeros((0, 2), np.uint32)
    return np.concatenate(codes), np.concatenate(hashes), np.concatenate(lengths)


def _judge_languages(batch, found: list[int], surest: float, src_lang: str, tgt_lang: str) -> None:
    from mt_transformer.data.language_id import another_language

    open_ = [i for i, code in enumerate(found) if code == 0]
    for side, language in ((0, src_lang), (1, tgt_lang)):
        for i, other in zip(open_, another_language([batch[i][side] for i in open_], language, surest)):
            if other:
                found[i] = CODE["language"]


def _first_of_each(keys: np.ndarray, open_: np.ndarray, costs: np.ndarray | None = None) -> np.ndarray:
    """A mask of the open rows that are the first of their key among the open rows: the one of
    least cost where there are costs, the earliest of those on a tie."""
    rows = np.flatnonzero(open_)
    order = np.lexsort((rows, keys[rows])) if costs is None else np.lexsort((rows, costs[rows], keys[rows]))
    ranked = keys[rows][order]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = ranked[1:] != ranked[:-1]
    mask = np.zeros(len(keys), dtype=bool)
    mask[rows[order[first]]] = True
    return mask


def _among(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """A mask of the values found in `sorted_set`: np.isin's work in a fraction of its memory."""
    if not len(sorted_set):
        return np.zeros(len(values), dtype=bool)
    return sorted_set[np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)] == values


def _judge_corpus(codes: np.ndarray, hashes: np.ndarray, lengths: np.ndarray, settings: CleanConfig) -> None:
    """Pass 2, from the hashes and lengths alone: sides far longer than their corpus's, lines
    repeated on one side with many partners, duplicate pairs."""
    if settings.max_median_ratio is not None and len(codes):
        medians = np.median(lengths[codes == 0], axis=0) if (codes == 0).any() else np.zeros(2)
        long = (lengths > settings.max_median_ratio * np.maximum(medians, 1)).any(axis=1)
        codes[(codes == 0) & long] = CODE["long"]
    if settings.max_repeats is not None and len(codes):
        distinct = np.unique(hashes[:, 0], return_index=True)[1]  # a row of each pair (it fixes both lines)
        for side in (1, 2):  # the number of distinct partners each line has, over the whole corpus
            lines, partners = np.unique(hashes[distinct, side], return_counts=True)
            codes[(codes == 0) & _among(hashes[:, side], lines[partners > settings.max_repeats])] = CODE["repeated"]
    if settings.dedup_pairs:
        codes[(codes == 0) & ~_first_of_each(hashes[:, 0], codes == 0)] = CODE["duplicate_pair"]


def _lexical(spool: _Spool, settings: CleanConfig, codes: np.ndarray, lengths: np.ndarray, langs) -> None:
    """Pass 3: the open pairs whose words translate each other worst (data/lexical.py) dropped."""
    from mt_transformer.data.lexical import untranslated

    open_ = codes == 0
    if open_.sum() < LEXICAL_PAIRS:
        log.info("data.clean.lexical: %d pairs, under %d: not judged", open_.sum(), LEXICAL_PAIRS)
        return
    codes[untranslated(spool.batches, open_, lengths, langs, settings.lexical, spool.directory)] = CODE["lexical"]


def _score(spool: _Spool, settings: CleanConfig, codes: np.ndarray, scorer: Scorer) -> np.ndarray:
    """Pass 4: the cost of each pair left by the rules (infinity for the others), batch by batch;
    the worst data.clean.score_drop of those pairs dropped."""
    costs = np.full(len(codes), np.inf, dtype=np.float32)
    row, began = 0, time.perf_counter()
    for batch in spool.batches():
        open_ = np.flatnonzero(codes[row : row + len(batch)] == 0)
        if len(open_):
            costs[row + open_] = scorer([batch[i][0] for i in open_], [batch[i][1] for i in open_])
        row += len(batch)
        log.info("scored %d of %d pairs (%.0f pairs/s)", row, len(codes), row / (time.perf_counter() - began))
    scored = np.flatnonzero(codes == 0)
    worst = scored[np.lexsort((scored, -costs[scored]))][: round(settings.score_drop * len(scored))]
    codes[worst] = CODE["score"]
    return costs


def clean_pairs(
    pairs,
    settings: CleanConfig,
    src_lang: str,
    tgt_lang: str,
    out_prefix: str,
    examples: int = EXAMPLES,
    scorer: Scorer | None = None,
) -> dict:
    """Clean a Dataset of `src` and `tgt` columns into the text files OUT.SRC_LANG and OUT.TGT_LANG
    (written whole or not at all); returns the report: pairs read and kept, per reason the pairs
    dropped and the first `examples` of them (line number from 1, source, target), and the speed.
    `scorer`: data.clean.scorers opened (decoding/scoring.PairCosts), where the settings name any."""
    if settings.scorers and scorer is None:
        raise ValueError("data.clean.scorers: the stage needs their scorer")
    began = time.perf_counter()
    shown: dict[str, list] = {}
    paths = (f"{out_prefix}.{src_lang}", f"{out_prefix}.{tgt_lang}")
    with contextlib.ExitStack() as stack:
        directory = os.path.dirname(os.path.abspath(out_prefix))
        spool = _Spool(stack.enter_context(tempfile.TemporaryDirectory(prefix=".cleaning-", dir=directory)))
        codes, hashes, lengths = _judge(pairs, settings, src_lang, tgt_lang, spool)
        _judge_corpus(codes, hashes, lengths, settings)
        if settings.lexical is not None:
            _lexical(spool, settings, codes, lengths, (src_lang, tgt_lang))
        costs = _score(spool, settings, codes, scorer) if settings.scorers else None
        if settings.targets_deduplicated:
            codes[(codes == 0) & ~_first_of_each(hashes[:, 2], codes == 0, costs)] = CODE["duplicate_target"]
        tmps = [stack.enter_context(atomic_path(path)) for path in paths]
        outs = [stack.enter_context(open(tmp, "w", encoding="utf-8", newline="\n")) for tmp in tmps]
        row = 0
        for batch in spool.batches():
            for line, (s, t), code in zip(range(row + 1, row + len(batch) + 1), batch, codes[row : row + len(batch)]):
                if code == 0:
                    outs[0].write(s + "\n")
                    outs[1].write(t + "\n")
                elif len(taken := shown.setdefault(REASONS[code], [])) < examples:
                    taken.append([line, s, t])
            row += len(batch)
    seconds = time.perf_counter() - began
    counts = np.bincount(codes, minlength=len(REASONS))
    return {
        "pairs": int(len(codes)),
        "kept": int(counts[0]),
        "dropped": {reason: int(n) for reason, n in zip(REASONS[1:], counts[1:]) if n},
        "examples": shown,
        "seconds": round(seconds, 3),
        "pairs_per_second": round(len(codes) / seconds) if seconds else None,
        "settings": dataclasses.asdict(settings),
    }


def cleaned_corpora(data: DataConfig, run_dir: str, main: bool = True, scoring=None) -> dict[str, CorpusConfig]:
    """Each corpus whose data.clean has a rule on, by its key (data, data.corpora[i]): the text
    corpus of its cleaned training pairs, made once into the run's cache (under the pairs' files,
    the rules and the scorers' files) and its report kept in the run directory's cleaning.json.
    `scoring`: what opens data.clean.scorers (decoding/scoring.PairCosts). Under torchrun the
    `main` process calls it first, the others after: they read what it made."""
    found, reports = {}, {}
    for corpus, key in corpus_keys(data):
        settings = data.clean_of(corpus)
        if not settings.active or corpus.train is None:
            continue
        rules = dataclasses.asdict(settings)
        if settings.scorers:
            rules["scorers"] = scoring.identity(settings.scorers)
        source = split_source(corpus, "train")
        directory = os.path.join(
            cache_directory(data, run_dir), "clean-" + cache_key(source, corpus.files("train"), [], rules)
        )
        report_path = os.path.join(directory, REPORT)
        if not os.path.isfile(report_path):
            check_output(directory, CACHE_WRITER)
            pairs = pairs_to_clean(corpus, key)
            scorer = scoring.opened(settings.scorers, corpus.src_lang, corpus.tgt_lang) if settings.scorers else None
            with atomic_dir(directory, written_by=CACHE_WRITER) as tmp:
                out = os.path.join(tmp, "train")
                report = clean_pairs(pairs, settings, corpus.src_lang, corpus.tgt_lang, out, scorer=scorer)
                write_text(os.path.join(tmp, REPORT), json.dumps(report, indent=1, ensure_ascii=False) + "\n")
        reports[key] = report = read_json(report_path, "the cleaning report")
        if not report["kept"]:
            worst = max(report["dropped"], key=report["dropped"].get)
            raise UserError(
                f"{key}.clean: every training pair was dropped, {report['dropped'][worst]} by {worst}; "
                f"see {report_path}, and loosen or turn off that rule (null)"
            )
        dropped = ", ".join(f"{n} {reason}" for reason, n in report["dropped"].items()) or "none"
        log.info(
            "%s: cleaning kept %d of %d training pairs; dropped: %s", key, report["kept"], report["pairs"], dropped
        )
        found[key] = corpus.trained_from(os.path.join(directory, "train"))  # a teacher translates these
    if reports and main:
        write_text(os.path.join(run_dir, REPORT_FILE), json.dumps(reports, indent=1, ensure_ascii=False) + "\n")
    return found
