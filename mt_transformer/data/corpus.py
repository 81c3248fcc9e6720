"""Loading parallel text through HuggingFace `datasets` and cleaning it.

Every source becomes a `datasets.Dataset` with two string columns, `src` and `tgt`, so it is
memory-mapped Arrow on disk and cached by `datasets`:

- text:  line-aligned files `{prefix}.{src_lang}` and `{prefix}.{tgt_lang}`
- tsv:   one pair per line, `source<TAB>target`
- jsonl: rows `{"translation": {src_lang: .., tgt_lang: ..}}` or named columns
- hub:   any `datasets` dataset by name and config, with the same two row shapes; a local
         copy of a hub repository loads through the same call (`hub_location`)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from hashlib import sha256
from itertools import islice

import datasets
import pyarrow as pa

from mt_transformer.config import CorpusConfig
from mt_transformer.data.text import count_lines, normalize, stream_lines
from mt_transformer.errors import UserError
from mt_transformer.files import atomic_path

log = logging.getLogger(__name__)


def quiet_datasets() -> None:
    """No progress bars or info messages from `datasets`: the trainer reports progress itself."""
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()


def _read_text(path: str, replace_invalid: bool = False) -> datasets.Dataset:
    """The lines of a text file as a Dataset with a `text` column, kept as an Arrow file in
    `datasets`' cache under the file's path, size and times (made once, 65,536 lines at a time,
    so memory does not grow with the file). A line ends at "\n" only (with a "\r" before it), as
    mt-translate and mt-eval read lines: a lone "\r" inside a line is white space there
    (normalize), never the end of one. `replace_invalid`: as stream_lines."""
    try:
        status = os.stat(path)
    except OSError as error:
        raise UserError(f"{path}: could not be read ({error.strerror})") from None
    stamp = f"{os.path.realpath(path)}|{status.st_size}|{status.st_mtime_ns}|{status.st_ctime_ns}|{status.st_ino}"
    stamp += "|replaced" if replace_invalid else ""
    cached = os.path.join(datasets.config.HF_DATASETS_CACHE, "mt_transformer-lines", sha256(stamp.encode()).hexdigest())
    if not os.path.isfile(cached):
        with atomic_path(cached) as tmp, pa.OSFile(tmp, "wb") as sink:
            with pa.ipc.new_stream(sink, pa.schema([("text", pa.string())])) as writer:
                lines = stream_lines(path, replace_invalid)
                while batch := list(islice(lines, 1 << 16)):
                    writer.write_batch(pa.record_batch([pa.array(batch, pa.string())], names=["text"]))
    return datasets.Dataset.from_file(cached)


def _text_pairs(src_path: str, tgt_path: str, key: str) -> datasets.Dataset:
    src, tgt = _read_text(src_path), _read_text(tgt_path)
    if len(src) != len(tgt):
        raise UserError(f"{key}: {src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}")
    return datasets.concatenate_datasets([src.rename_column("text", "src"), tgt.rename_column("text", "tgt")], axis=1)


def _split_tsv(batch: dict, indices: list[int], path: str) -> dict:
    src, tgt = [], []
    for line, index in zip(batch["text"], indices):
        fields = line.split("\t")
        if len(fields) != 2:
            raise UserError(f"{path}: line {index + 1} has {len(fields)} tab-separated fields, expected 2")
        src.append(fields[0])
        tgt.append(fields[1])
    return {"src": src, "tgt": tgt}


def _row_pairs(dataset: datasets.Dataset, corpus: CorpusConfig, key: str):
    """Map jsonl/hub rows (a `translation` dict or named columns) to `src`/`tgt` columns."""
    src_lang, tgt_lang, src_column, tgt_column = corpus.src_lang, corpus.tgt_lang, corpus.src_column, corpus.tgt_column
    columns = dataset.column_names
    if not (src_column or tgt_column) and "translation" in columns:

        def pick(batch):
            try:
                return {
                    "src": [p[src_lang] for p in batch["translation"]],
                    "tgt": [p[tgt_lang] for p in batch["translation"]],
                }
            except (KeyError, TypeError):
                raise UserError(
                    f"{key}: rows' translation field lacks {src_lang!r} or {tgt_lang!r} "
                    f"(set data.src_lang and data.tgt_lang)"
                ) from None
    else:
        src_name, tgt_name = src_column or src_lang, tgt_column or tgt_lang
        missing = [c for c in (src_name, tgt_name) if c not in columns]
        if missing:
            raise UserError(f"{key}: no column {missing[0]!r} in rows with columns {columns}")

        def pick(batch):
            return {"src": batch[src_name], "tgt": batch[tgt_name]}

    # the input columns are removed before the output is added, so "src"/"tgt" inputs cannot clash
    return dataset.map(pick, batched=True, remove_columns=columns)


HUB_MIRROR = "MT_HUB_MIRROR"


def hub_location(hub_name: str) -> str:
    """What `datasets.load_dataset` opens for `data.hub_name`: the copy of that hub repository
    under $MT_HUB_MIRROR/{owner}/{name} where the variable names a directory holding one (for
    machines without hub access), else the name itself: a hub id or a local directory."""
    mirror = os.environ.get(HUB_MIRROR)
    if mirror and os.path.isdir(os.path.join(mirror, hub_name)):
        return os.path.join(mirror, hub_name)
    return hub_name


def hub_copy_stamp(hub_name: str) -> list | None:
    """Each file of the local copy `hub_location` finds, with its size and modification time
    (a cache key that changes with the copy without reading gigabytes); None for the hub."""
    location = hub_location(hub_name)
    if not os.path.isdir(location):
        return None
    stamp = []
    for directory, subdirectories, names in os.walk(location):
        subdirectories[:] = sorted(d for d in subdirectories if not d.startswith("."))
        for name in sorted(n for n in names if not n.startswith(".")):
            info = os.stat(os.path.join(directory, name))
            stamp.append([os.path.relpath(os.path.join(directory, name), location), info.st_size, info.st_mtime_ns])
    return stamp


def _load_hub(corpus: CorpusConfig, split: str, key: str) -> datasets.Dataset:
    location = hub_location(corpus.hub_name)
    # `datasets` caches a local copy under its name and config alone, so a copy changed or moved
    # would load as it was: each state of a copy gets its own cache, keyed by its files
    stamp = hub_copy_stamp(corpus.hub_name)
    cache_dir = None
    if stamp is not None:
        digest = sha256(json.dumps([os.path.realpath(location), stamp]).encode()).hexdigest()[:24]
        cache_dir = os.path.join(datasets.config.HF_DATASETS_CACHE, "mt_transformer-copies", digest)
    try:
        return datasets.load_dataset(location, corpus.hub_config, split=getattr(corpus, split), cache_dir=cache_dir)
    except ConnectionError as error:
        raise UserError(
            f"{key}.hub_name: {corpus.hub_name} could not be fetched from the hub ({_first_line(error)}); "
            f"offline, point data.hub_name or ${HUB_MIRROR} at a local copy"
        ) from None
    except (FileNotFoundError, ValueError, datasets.exceptions.DatasetNotFoundError) as error:
        raise UserError(f"{key}: {corpus.hub_name}: {_first_line(error)}") from None


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def load_pairs(corpus: CorpusConfig, split: str, key: str, replace_invalid: bool = False) -> datasets.Dataset:
    """Load one split of a corpus as a Dataset with normalized string columns `src` and `tgt`.

    `key` names the split's config entry (e.g. `data.train`) in error messages. `replace_invalid`:
    TSV lines that are not UTF-8 are read with U+FFFD (for data.clean), not refused.
    """
    quiet_datasets()
    location = getattr(corpus, split)
    for path in corpus.files(split):
        if os.path.isfile(path) and os.path.getsize(path) == 0:
            raise UserError(f"{key}: {path} is empty")
    if corpus.format == "text":
        dataset = _text_pairs(*corpus.files(split), key)
    elif corpus.format == "tsv":
        lines = _read_text(location, replace_invalid)
        dataset = lines.map(
            _split_tsv, batched=True, with_indices=True, remove_columns=["text"], fn_kwargs={"path": location}
        )
    elif corpus.format == "jsonl":
        try:
            rows = datasets.load_dataset("json", data_files={"rows": location}, split="rows")
        except Exception as error:  # the json builder wraps parse errors in several types
            raise UserError(f"{location}: not valid JSON lines ({type(error).__name__})") from None
        dataset = _row_pairs(rows, corpus, key)
    elif corpus.format == "hub":
        dataset = _row_pairs(_load_hub(corpus, split, key.rsplit(".", 1)[0]), corpus, key)
    else:
        raise UserError(f"data.format: unknown format {corpus.format!r}")

    if len(dataset) == 0:
        raise UserError(f"{key}: {location} holds no pairs")
    return _normalized(dataset)


class TextPairs:
    """The pairs of two line-aligned text files, normalized as load_pairs gives them, read in
    batches as they are asked for, the files read again on each pass: memory holds one batch,
    whatever the files' size (no Arrow copy is made). What data.clean reads from text files:
    a line that is not UTF-8 comes with U+FFFD in place of its bad bytes, for the stage to drop."""

    def __init__(self, src_path: str, tgt_path: str, key: str = "--src/--tgt"):
        for path in (src_path, tgt_path):
            if os.path.isfile(path) and os.path.getsize(path) == 0:
                raise UserError(f"{key}: {path} is empty")
        sizes = [count_lines(path) for path in (src_path, tgt_path)]
        if sizes[0] != sizes[1]:
            raise UserError(f"{key}: {src_path} has {sizes[0]} lines but {tgt_path} has {sizes[1]}")
        self.paths, self.size = (src_path, tgt_path), sizes[0]

    def __len__(self) -> int:
        return self.size

    def iter(self, batch_size: int) -> Iterator[dict[str, list[str]]]:
        sources, targets = (stream_lines(path, replace_invalid=True) for path in self.paths)
        while batch := list(islice(zip(sources, targets), batch_size)):
            yield {"src": [normalize(s) for s, _ in batch], "tgt": [normalize(t) for _, t in batch]}


def pairs_to_clean(corpus: CorpusConfig, key: str):
    """A corpus's training pairs as data.clean reads them: text files streamed (TextPairs), other
    formats through `datasets`, TSV lines that are not UTF-8 with U+FFFD."""
    if corpus.format == "text":
        return TextPairs(*corpus.files("train"), f"{key}.train")
    return load_pairs(corpus, "train", f"{key}.train", replace_invalid=True)


def _normalized(dataset: datasets.Dataset) -> datasets.Dataset:
    def clean(batch):
        return {"src": [normalize(s or "") for s in batch["src"]], "tgt": [normalize(t or "") for t in batch["tgt"]]}

    return dataset.map(clean, batched=True)


class ColumnLines:
    """One column of a Dataset as an iterable of its values, readable again on each pass, 10,000
    rows at a time: a datasets Column read row by row is several times slower (docs/benchmarks.md)."""

    BATCH = 10_000

    def __init__(self, dataset: datasets.Dataset, column: str):
        self.dataset = dataset.select_columns([column])
        self.column = column

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self.dataset), self.BATCH):
            yield from self.dataset[start : start + self.BATCH][self.column]


def drop_empty(dataset: datasets.Dataset) -> tuple[datasets.Dataset, int]:
    """Drop pairs with an empty side (training data only). Returns the dataset and the count dropped."""
    kept = dataset.filter(lambda batch: [bool(s) and bool(t) for s, t in zip(batch["src"], batch["tgt"])], batched=True)
    return kept, len(dataset) - len(kept)
