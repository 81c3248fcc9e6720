"""The teacher stage of a distilled run (sequence-level knowledge distillation, Kim and Rush 2016):
a corpus with a `teacher` learns from the teacher's translations of its training sources instead
of its own targets.

The translations are made once, before the tokenizer and the encoding, by the corpus job of
mt-translate (jobs/job.py): in windows of TEACHER_WINDOW lines, each written and
recorded before the next, so that a killed run continues after its last window and ends with the
same bytes. Under torchrun each rank translates its share of the windows and rank 0 merges them.
They live in the run's cache under a key of the teacher's files, the sources and the settings,
so a run with the same three skips the stage:

    cache/teacher-KEY/translations.tsv      LOG_PROB_PER_TOKEN<TAB>TRANSLATION, a line per source line
    cache/teacher-KEY/train.SRC, train.TGT  the pairs the run learns from, as plain text
    cache/teacher-KEY/pairs.json            the filter that made them, what it dropped, how many
                                            are the reference word for word
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import logging
import os
from collections.abc import Iterator

import torch

from mt_transformer import checkpoint
from mt_transformer.config import Config, CorpusConfig, DataConfig, config_from_dict, corpus_keys
from mt_transformer.data.cache import CACHE_WRITER, cache_directory, cache_key, split_source
from mt_transformer.data.corpus import load_pairs, quiet_datasets
from mt_transformer.decoding.ctranslate2_engine import read_settings
from mt_transformer.decoding.engines import open_translator
from mt_transformer.decoding.runtime import is_export
from mt_transformer.decoding.scoring import score_ids
from mt_transformer.errors import UserError
from mt_transformer.evaluation.scores import sentence_scores
from mt_transformer.files import atomic_path, read_json, write_text
from mt_transformer.jobs.job import CorpusJob
from mt_transformer.jobs.records import finished_record, merge_rank_shards
from mt_transformer.jobs.windows import Shard, Window, read_windows
from mt_transformer.outputs import claim_dir
from mt_transformer.processes import from_environment
from mt_transformer.training import distributed

log = logging.getLogger(__name__)

VERSION = "1"  # of the translations' format and selection: a new one translates again
# lines per window: a kill loses at most this many translations; sorting this many by length
# keeps batches as full as sorting the whole corpus would, to within a few percent
TEACHER_WINDOW = 2048
TRANSLATIONS = "translations.tsv"
PAIRS_RECORD = "pairs.json"


def check_teachers(data: DataConfig) -> None:
    """A one-line error naming the key of the first teacher that is not a model every command
    loads (before anything is written)."""
    for corpus, key in corpus_keys(data):
        for path in corpus.teacher:
            try:
                teacher_config(path)
            except UserError as error:
                raise UserError(f"{key}.teacher: {error}") from None


def teacher_config(path: str) -> Config:
    """The config a teacher was trained (or imported, or exported) with."""
    if is_export(path):
        return config_from_dict(read_settings(path)["config"])
    return checkpoint.read_config(checkpoint.resolve(path))


def distilled_corpora(
    data: DataConfig, run_dir: str, device: torch.device, threads: int = 0, sources: dict | None = None
) -> dict[str, CorpusConfig]:
    """Each corpus with a teacher, by its key (data, data.corpora[i]): the text corpus of its
    distilled training pairs, translated first where the cache lacks them; `sources`: by key, the
    corpus to translate instead (its cleaned pairs). Every rank of a torchrun group calls it (each
    translates its shard) and gets the same answer."""
    quiet_datasets()
    distilled = {}
    for corpus, key in corpus_keys(data):
        corpus = (sources or {}).get(key, corpus)
        if corpus.teacher:
            directory = _translated(data, corpus, key, cache_directory(data, run_dir), device, threads)
            # the distilled pairs are tagged and changed (data.augment) as the corpus's were to be
            distilled[key] = dataclasses.replace(corpus.trained_from(os.path.join(directory, "train")), teacher=())
    return distilled


def _translated(
    data: DataConfig, corpus: CorpusConfig, key: str, cache_dir: str, device: torch.device, threads: int
) -> str:
    """The directory of the corpus's distilled pairs, translating its sources when the cache has no
    translation of them by this teacher."""
    settings = {
        "teacher": [checkpoint.identity(path) for path in corpus.teacher],
        "nbest": data.teacher_nbest,
        "select": data.teacher_select,
        "version": VERSION,
    }
    source = split_source(corpus, "train")
    directory = os.path.join(cache_dir, "teacher-" + cache_key(source, corpus.files("train"), [], settings))
    output = os.path.join(directory, TRANSLATIONS)
    if from_environment().is_main:  # one process claims it, before any writes there
        claim_dir(directory, CACHE_WRITER)
    distributed.barrier()
    pairs = load_pairs(corpus, "train", f"{key}.train")
    if os.path.isfile(output):
        log.info("%s: the teacher's translations of %d training sources (cache)", key, len(pairs))
    else:
        _translate(data, corpus, key, pairs, output, settings, device, threads)
    if from_environment().is_main:
        _write_pairs(directory, corpus, pairs, data.teacher_min_log_prob, key)
    distributed.barrier()
    return directory


def _translate(data, corpus, key, pairs, output: str, settings: dict, device, threads: int) -> None:
    processes = from_environment()
    shard = Shard(processes.rank, processes.world_size) if processes.enabled else Shard()
    path = shard.path(output) if processes.enabled else output
    if finished_record(path):  # this rank's share was finished before a stop
        _merge_shards(output, processes)
        return
    translator = _teacher_translator(corpus, data.teacher_nbest, device, threads)
    log.info(
        "%s: translating %d training sources with the teacher (%s) into %s",
        key,
        len(pairs),
        translator.runtime.engine,
        os.path.dirname(output),
    )

    def work(window: Window, advance) -> list[str]:
        sources, references = (list(column) for column in zip(*window.rows))
        translator.reseed(window.index)
        chosen = _selected(translator(sources, advance), references, data.teacher_select)
        return [f"{score:.4f}\t{h.text}\n" for h, score in zip(chosen, _per_token(translator, sources, chosen))]

    rows = (_column(pairs, "src"), _column(pairs, "tgt"))
    job = CorpusJob(path, settings, TEACHER_WINDOW, shard)
    try:
        job.run(read_windows(list(rows), ["sources", "targets"], TEACHER_WINDOW), work, len(pairs), label="teacher")
    finally:
        translator = None
        gc.collect()  # the teacher's threads and memory go before training starts
    _merge_shards(output, processes)


def _merge_shards(output: str, processes) -> None:
    if processes.enabled:
        distributed.barrier()
        if processes.is_main:
            merge_rank_shards(output, processes.world_size)
        distributed.barrier()


def _teacher_translator(corpus: CorpusConfig, nbest: int, device: torch.device, threads: int):
    """The teacher (an ensemble for several paths) on the engine auto picks, with its own decode
    settings and a beam of at least `nbest`."""
    own = teacher_config(corpus.teacher[0])
    translator = open_translator(
        list(corpus.teacher),
        "auto",
        device,
        threads=threads,
        tgt_lang=corpus.tgt_lang,  # for a teacher with target tags or language tokens (data/languages.py)
        src_lang=corpus.src_lang,
        n_best=nbest,
        beam_size=max(own.decode.beam_size, nbest),
        sampling=False,
    )
    return translator


def _column(pairs, name: str) -> Iterator[str]:
    for batch in pairs.iter(batch_size=1000):
        yield from batch[name]


def _selected(results, references: list[str], select: str) -> list:
    """Per source line, its chosen hypothesis: the teacher's best, or (chrf) the one whose
    sentence chrF against the reference is highest, the better-ranked on a tie."""
    chosen = []
    for hypotheses, reference in zip(results, references):
        best = hypotheses[0]
        if select == "chrf" and len(hypotheses) > 1:
            scores = sentence_scores([h.text for h in hypotheses], [reference] * len(hypotheses), ("chrf",))
            best = hypotheses[max(range(len(hypotheses)), key=lambda i: (scores[i]["chrf"], -i))]
        chosen.append(best)
    return chosen


def _per_token(translator, sources: list[str], chosen: list) -> list[float]:
    """The teacher's log-probability per token (EOS counted) of each chosen translation, 0 for an
    empty one. Our engine's search gives it exactly; CTranslate2's scores are scored again here,
    the chosen line only (scoring the whole n-best made the stage several times slower). A line translated
    in parts keeps its search's sum."""
    per_token = [h.log_prob / (len(h.tokens) + 1) if h.text else 0.0 for h in chosen]
    if translator.model is not None:
        return per_token
    src_ids = translator.source_ids(sources)
    limit, positions = translator.max_input_len, translator.max_positions
    whole = [
        i
        for i, (ids, h) in enumerate(zip(src_ids, chosen))
        if h.text and (not limit or len(ids) <= limit) and (positions is None or len(h.tokens) < positions)
    ]
    for i, line in zip(whole, score_ids(translator, [src_ids[i] for i in whole], [chosen[i].tokens for i in whole])):
        per_token[i] = line.per_token
    return per_token


def _write_pairs(directory: str, corpus: CorpusConfig, pairs, min_log_prob: float | None, key: str) -> None:
    """train.SRC and train.TGT from the sources and the translations, less the pairs the filter
    drops; rewritten only when the filter changed."""
    record_path = os.path.join(directory, PAIRS_RECORD)
    if (
        os.path.isfile(record_path)
        and read_json(record_path, "the distilled pairs' record")["min_log_prob"] == min_log_prob
    ):
        return
    kept = dropped = as_reference = 0
    src_path, tgt_path = (os.path.join(directory, f"train.{lang}") for lang in (corpus.src_lang, corpus.tgt_lang))
    with contextlib.ExitStack() as stack:
        src_tmp, tgt_tmp = (stack.enter_context(atomic_path(path)) for path in (src_path, tgt_path))
        src_out = stack.enter_context(open(src_tmp, "w", encoding="utf-8"))
        tgt_out = stack.enter_context(open(tgt_tmp, "w", encoding="utf-8"))
        translations = stack.enter_context(open(os.path.join(directory, TRANSLATIONS), encoding="utf-8"))
        for source, reference, line in zip(_column(pairs, "src"), _column(pairs, "tgt"), translations):
            score, text = line.rstrip("\n").split("\t", 1)
            if min_log_prob is not None and text and float(score) < min_log_prob:
                dropped += 1
                continue
            src_out.write(source + "\n")
            tgt_out.write(text + "\n")
            kept += 1
            as_reference += text == reference
    # a teacher that learnt these very pairs gives many back word for word: a student learns
    # from the rest, and chrf selection among an n-best makes them more
    record = {"min_log_prob": min_log_prob, "pairs": kept, "dropped": dropped, "as_reference": as_reference}
    write_text(record_path, json.dumps(record, indent=1) + "\n")
    what = f", {dropped} dropped under data.teacher_min_log_prob {min_log_prob}" if min_log_prob is not None else ""
    share = f"{as_reference / kept:.0%}" if kept else "none"
    log.info("%s: %d distilled pairs in %s%s; %s the reference word for word", key, kept, directory, what, share)
