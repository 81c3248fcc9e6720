"""The recipes in configs/recipes/ run as their comments and the README give them, on a local copy
of their hub dataset, and load and train for a language pair other than their default,
including one whose target script has no spaces (as Chinese and Japanese do)."""

import json
import os
import shutil

import pytest
import yaml

from conftest import ROOT, run_cli
from mt_transformer.outputs import OUTPUT_MARKER

RECIPES = ["configs/recipes/small_cpu.yaml", "configs/recipes/base_gpu.yaml", "configs/recipes/crawl_cpu.yaml"]
HAN = [chr(0x4E00 + 37 * i) for i in range(400)]


@pytest.fixture(scope="module")
def no_space_corpus(corpus, tmp_path_factory) -> str:
    """The generated English-German corpus with each German word written as one or two Han
    characters and no spaces: English -> "zh", a pair whose target script has no word breaks."""
    directory = tmp_path_factory.mktemp("en_zh")
    codes: dict[str, str] = {}
    for split in ("train", "valid", "test"):
        with open(f"{corpus}/{split}.de", encoding="utf-8") as f:
            lines = f.read().splitlines()
        out = []
        for line in lines:
            for word in line.split():
                n = len(codes)
                codes.setdefault(
                    word, HAN[n % len(HAN)] + (HAN[(n // len(HAN)) * 7 % len(HAN)] if n >= len(HAN) else "")
                )
            out.append("".join(codes[w] for w in line.split()))
        (directory / f"{split}.zh").write_text("\n".join(out) + "\n", encoding="utf-8")
        with open(f"{corpus}/{split}.en", encoding="utf-8") as f:
            (directory / f"{split}.en").write_text(f.read(), encoding="utf-8")
    return str(directory)


def overrides(corpus: str, run: str, tgt_lang: str = "zh") -> list[str]:
    return [
        "data.format=text",
        "data.src_lang=en",
        f"data.tgt_lang={tgt_lang}",
        f"data.train={corpus}/train",
        f"data.valid={corpus}/valid",
        f"data.test={corpus}/test",
        f"train.output_dir={run}",
    ]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipes_take_another_pair(recipe, no_space_corpus, tmp_path):
    result = run_cli(
        "mt-train",
        "--config",
        os.path.join(ROOT, recipe),
        "--dry-run",
        "--set",
        *overrides(no_space_corpus, str(tmp_path / "run")),
    )
    assert result.returncode == 0, result.stderr
    assert "tgt_lang: zh" in result.stdout and "character_coverage: 0.0" in result.stdout
    assert not os.path.exists(tmp_path / "run")


@pytest.mark.slow
def test_small_cpu_trains_on_a_pair_without_spaces(no_space_corpus, tmp_path):
    """The small_cpu recipe, unchanged but for the pair, a vocabulary this tiny corpus can fill and
    a few updates: the tokenizer picks the rich-script coverage, translation and scoring work."""
    run = str(tmp_path / "run")
    train = run_cli(
        "mt-train",
        "--config",
        os.path.join(ROOT, RECIPES[0]),
        "--set",
        *overrides(no_space_corpus, run),
        "data.vocab_size=400",
        "train.max_steps=3",
        "train.valid_every=3",
        "train.valid_max_sentences=10",
        "train.max_tokens=1500",
    )
    assert train.returncode == 0, train.stderr
    assert "character coverage 0.9995" in train.stderr + train.stdout
    for lang in ("en", "zh"):  # 8 test lines: an untrained model writes to the length limit
        with open(f"{no_space_corpus}/test.{lang}", encoding="utf-8") as f:
            (tmp_path / f"test.{lang}").write_text("".join(f.readlines()[:8]), encoding="utf-8")
    scored = run_cli(
        "mt-eval", "--checkpoint", run, "--src", str(tmp_path / "test.en"), "--ref", str(tmp_path / "test.zh"), "--json"
    )
    assert scored.returncode == 0, scored.stderr
    assert "tok:zh" in json.loads(scored.stdout)["signature"]["bleu"]


def hub_copy(corpus: str, directory) -> str:
    """A local copy of the hub repository bentrevett/multi30k in its own shape, made from the
    generated corpus: train.jsonl, val.jsonl (the validation split) and test.jsonl, each row
    {"en": ..., "de": ...}; returns the directory to name in $MT_HUB_MIRROR."""
    repo = directory / "bentrevett" / "multi30k"
    repo.mkdir(parents=True)
    for split, name, n in (("train", "train", 600), ("valid", "val", 30), ("test", "test", 12)):
        with open(f"{corpus}/{split}.en", encoding="utf-8") as en, open(f"{corpus}/{split}.de", encoding="utf-8") as de:
            rows = [{"en": e.strip(), "de": d.strip()} for e, d in zip(en, de)][:n]
        (repo / f"{name}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return str(directory)


def opus100_copy(corpus: str, directory, noise: dict[str, list[tuple[str, str]]]) -> str:
    """A local copy of the hub repository Helsinki-NLP/opus-100 in its own shape, its config de-en
    only: de-en/{split}-00000-of-00001.parquet with rows {"translation": {"de": ..., "en": ...}},
    the splits named in README.md's configs; the training split the generated pairs and `noise`'s
    pairs among them. Returns the directory to name in $MT_HUB_MIRROR."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    repo = directory / "Helsinki-NLP" / "opus-100"
    (repo / "de-en").mkdir(parents=True)
    splits = "".join(f"  - split: {name}\n    path: de-en/{name}-*\n" for name in ("test", "train", "validation"))
    (repo / "README.md").write_text(f"---\nconfigs:\n- config_name: de-en\n  data_files:\n{splits}---\n")
    for split, name in (("train", "train"), ("valid", "validation"), ("test", "test")):
        with open(f"{corpus}/{split}.de", encoding="utf-8") as de, open(f"{corpus}/{split}.en", encoding="utf-8") as en:
            pairs = [(d.strip(), e.strip()) for d, e in zip(de, en)]
        if split == "train":  # each noisy pair after the clean one of its index
            mixed = []
            for k, pair in enumerate(pairs[:600]):
                mixed += [pair, *(kind[k] for kind in noise.values() if k < len(kind))]
            pairs = mixed
        rows = [{"de": d, "en": e} for d, e in pairs]
        pq.write_table(pa.table({"translation": rows}), repo / "de-en" / f"{name}-00000-of-00001.parquet")
    return str(directory)


def test_crawl_cpu_cleans_a_copy_of_its_hub_corpus_with_crawl_noise(corpus, tmp_path, monkeypatch):
    """configs/recipes/crawl_cpu.yaml reads Helsinki-NLP/opus-100 through datasets.load_dataset (a
    local copy in the hub's own files) and cleans its training pairs by the defaults: the copies,
    duplicates and French targets put among them go, the pairs as generated stay."""
    with open(f"{corpus}/train.de", encoding="utf-8") as de, open(f"{corpus}/train.en", encoding="utf-8") as en:
        german, english = de.read().splitlines()[:600], en.read().splitlines()[:600]
    french = ["Deux chiens jouent dans la neige fraîche du matin.", "Les enfants courent vite dans le grand pré vert."]
    noise = {
        "copy": [(g, g) for g in german[:40] if len(g.split()) >= 4][:20],
        "duplicate": list(zip(german[:20], english[:20])),
        "language": [(g, french[k % 2]) for k, g in enumerate(german[:20])],
    }
    monkeypatch.setenv("MT_HUB_MIRROR", opus100_copy(corpus, tmp_path / "mirror", noise))
    run = tmp_path / "run"
    recipe = os.path.join(ROOT, "configs/recipes/crawl_cpu.yaml")
    result = run_cli("mt-prepare", "--config", recipe, "--set", f"train.output_dir={run}", "data.vocab_size=300")
    assert result.returncode == 0, result.stderr
    report = json.loads((run / "cleaning.json").read_text())["data"]
    assert report["pairs"] == 600 + sum(map(len, noise.values()))
    dropped = report["dropped"]
    assert dropped["copy"] == len(noise["copy"]) and dropped["duplicate_pair"] >= len(noise["duplicate"])
    assert dropped.get("language", 0) + dropped.get("repeated", 0) == len(noise["language"]), dropped
    assert report["kept"] >= 0.97 * 600, report


def readme_commands(marker: str) -> list[str]:
    """The README's one code block with a line that holds `marker`, one command per line,
    without the comments after them."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        blocks = f.read().split("```")[1::2]
    found = [[line.split("#")[0].strip() for line in block.strip().splitlines()] for block in blocks]
    (commands,) = [c for c in found if any(marker in line for line in c)]
    return commands


TINY = ["data.vocab_size=300", "model.d_model=32", "model.d_ff=64", "train.valid_every=6"]
TINY += ["train.valid_max_sentences=5", "decode.max_len_b=5", "train.curves=false"]


def test_small_cpu_runs_as_the_readme_gives_it_on_a_copy_of_its_hub_dataset(corpus, tmp_path, monkeypatch):
    """The recipe's own commands (train, average the last 3, score test2016 with --split test) in
    a fresh directory, the data from bentrevett/multi30k through datasets.load_dataset with the hub
    replaced by a local copy of the same files; only the model's size and length change."""
    commands = readme_commands("mt-average --inputs runs/small_cpu")
    assert [c.split()[0] for c in commands] == ["mt-train", "mt-average", "mt-eval"]
    with open(os.path.join(ROOT, RECIPES[0]), encoding="utf-8") as f:
        assert [line.strip("# \n") for line in f if line.startswith("#   mt-")][:3] == commands  # its comment too
    monkeypatch.setenv("MT_HUB_MIRROR", hub_copy(corpus, tmp_path / "mirror"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(os.path.join(ROOT, "configs"), tmp_path / "configs")
    extra = {
        "mt-train": ["--set", *TINY, "train.max_steps=6", "train.save_every=2"],
        "mt-average": [],
        "mt-eval": ["--json"],
    }
    for command in commands:
        name, *args = command.split()
        result = run_cli(name, *args, *extra[name])
        assert result.returncode == 0, f"{command}: {result.stderr}"
    scores = json.loads(result.stdout)
    assert set(scores) >= {"bleu", "chrf"} and "tok:13a" in scores["signature"]["bleu"]
    with open(tmp_path / "runs/small_cpu/config.yaml", encoding="utf-8") as f:
        assert yaml.safe_load(f)["data"]["hub_name"] == "bentrevett/multi30k"


@pytest.mark.slow
def test_a_student_runs_as_the_readme_gives_it_teacher_student_and_int8_export(corpus, tmp_path, monkeypatch):
    """The README's three commands in a fresh directory on a copy of the hub dataset, only the
    models' size and length changed: the student learns from the teacher's translations."""
    commands = readme_commands("data.teacher=runs/small_cpu")
    assert [c.split()[0] for c in commands] == ["mt-train", "mt-train", "mt-export"]
    with open(os.path.join(ROOT, "configs/recipes/student_cpu.yaml"), encoding="utf-8") as f:
        assert [line[1:].split("#")[0].strip() for line in f if line.startswith("#   mt-")] == commands
    monkeypatch.setenv("MT_HUB_MIRROR", hub_copy(corpus, tmp_path / "mirror"))
    monkeypatch.chdir(tmp_path)
    shutil.copytree(os.path.join(ROOT, "configs"), tmp_path / "configs")
    # the pairs as generated: a teacher trained 6 steps writes a few dozen distinct lines, and a pair
    # data.clean drops changes which (mt-clean and the other recipes' runs clean)
    tiny = ["--set", *TINY, "train.max_steps=6", "train.max_minutes=0", "data.clean={}"]
    for command in commands:
        name, *args = command.split()
        sized = ["data.vocab_size=0"] if "student" in command else []  # a tiny teacher writes few words
        result = run_cli(name, *args, *(tiny + sized if name == "mt-train" else []))
        assert result.returncode == 0, f"{command}: {result.stderr}"
    (distilled,) = [d for d in os.listdir("runs/student_cpu/cache") if d.startswith("teacher-")]
    assert len(open(f"runs/student_cpu/cache/{distilled}/train.en", encoding="utf-8").readlines()) == 600
    assert os.path.isfile("runs/student-int8/model.bin")


def test_a_hub_dataset_offline_without_a_copy_is_a_one_line_error(tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)  # read when datasets is imported
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    monkeypatch.delenv("MT_HUB_MIRROR", raising=False)
    result = run_cli(
        "mt-train", "--config", os.path.join(ROOT, RECIPES[0]), "--set", f"train.output_dir={tmp_path / 'run'}"
    )
    assert result.returncode == 2, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: data.hub_name: bentrevett/multi30k could not be fetched from the hub"), last
    # nothing written but the run directory's marker
    assert not os.path.exists(tmp_path / "run") or os.listdir(tmp_path / "run") in ([], [OUTPUT_MARKER])
