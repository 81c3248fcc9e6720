"""The teacher stage of a distilled run: its translations, their selection and filter, the cache
that keeps them, a killed stage continued, and a tiny teacher -> student run."""

import json
import os
import re
import shutil

import pytest
import torch
import yaml

from conftest import TORCHRUN, run_cli, tiny_config, write_config
from mt_transformer.config import DataConfig
from mt_transformer.decoding.translator import Translation
from mt_transformer.outputs import OUTPUT_MARKER
from mt_transformer.training import teacher

LINES = 150  # sources of the small corpus the stage translates here


@pytest.fixture(scope="module")
def sources(corpus, tmp_path_factory) -> str:
    """A prefix of LINES pairs of the generated corpus: {prefix}.en, {prefix}.de."""
    prefix = str(tmp_path_factory.mktemp("sources") / "train")
    for lang in ("en", "de"):
        with open(f"{corpus}/train.{lang}", encoding="utf-8") as f:
            lines = [next(f) for _ in range(LINES)]
        with open(f"{prefix}.{lang}", "w", encoding="utf-8") as f:
            f.writelines(lines)
    return prefix


def data_config(prefix: str, teachers: list[str], **keys) -> DataConfig:
    return DataConfig(src_lang="en", tgt_lang="de", train=prefix, teacher=tuple(teachers), **keys)


def distil(data: DataConfig, run_dir) -> str:
    """The directory of the distilled pairs, as mt-train makes it."""
    train_from = teacher.distilled_corpora(data, str(run_dir), torch.device("cpu"))
    return os.path.dirname(train_from["data"].train)


def read(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_the_pairs_record_counts_the_kept_lines_that_are_the_reference_word_for_word(tmp_path, caplog):
    from datasets import Dataset

    from mt_transformer.config import CorpusConfig

    pairs = Dataset.from_dict({"src": ["a", "b", "c", "d"], "tgt": ["ein", "zwei", "drei", "vier"]})
    (tmp_path / teacher.TRANSLATIONS).write_text("-0.1\tein\n-0.2\tzwo\n-3.0\tdrei\n-0.3\tvier\n", encoding="utf-8")
    corpus = CorpusConfig(src_lang="en", tgt_lang="de")
    with caplog.at_level("INFO"):
        teacher._write_pairs(str(tmp_path), corpus, pairs, -1.0, "train")  # drops "drei", the reference
    record = json.loads((tmp_path / teacher.PAIRS_RECORD).read_text())
    assert record == {"min_log_prob": -1.0, "pairs": 3, "dropped": 1, "as_reference": 2}
    assert read(tmp_path / "train.de") == ["ein", "zwo", "vier"]
    assert "3 distilled pairs in" in caplog.text and "67% the reference word for word" in caplog.text


def test_chrf_keeps_the_hypothesis_closest_to_the_reference_and_score_the_teachers_best():
    nbest = [
        Translation("ein Haus am See", [1, 2, 3, 4], -0.5, -2.0),
        Translation("das kleine Haus steht am See", [1, 2, 3, 4, 5, 6], -0.7, -4.9),
        Translation("das Haus", [1, 2], -0.9, -2.7),
    ]
    reference = "das kleine Haus steht am See ."
    assert teacher._selected([nbest], [reference], "chrf") == [nbest[1]]
    assert teacher._selected([nbest], [reference], "score") == [nbest[0]]
    # a tie goes to the better-ranked hypothesis: the first of equal chrF
    twins = [nbest[2], Translation("das Haus", [1, 2], -1.0, -3.0)]
    assert teacher._selected([twins], ["Haus"], "chrf") == [nbest[2]]


def test_the_chosen_lines_log_probabilities_per_token_are_the_teachers_exact_ones(sources, trained_run):
    """CTranslate2's chosen lines scored again equal the exact n-best's; an empty line scores 0."""
    corpus = data_config(sources, [trained_run], teacher_nbest=3, teacher_select="chrf")
    translator = teacher._teacher_translator(corpus, 3, torch.device("cpu"), 1)
    assert translator.model is None  # auto: CTranslate2, whose search's scores are not exact
    lines, references = read(f"{sources}.en")[:40] + [""], read(f"{sources}.de")[:40] + [""]
    chosen = teacher._selected(translator(lines), references, "chrf")
    exact = teacher._selected(translator.with_exact_scores()(lines), references, "chrf")
    assert [h.text for h in chosen] == [h.text for h in exact]
    expected = [h.log_prob / (len(h.tokens) + 1) for h in exact[:-1]] + [0.0]
    assert teacher._per_token(translator, lines, chosen) == pytest.approx(expected, abs=1e-4)
    assert teacher._per_token(translator, lines, chosen) != [h.log_prob / (len(h.tokens) + 1) for h in chosen[:-1]] + [
        0.0
    ]


def test_the_pairs_are_the_sources_and_the_teachers_translations_and_the_filter_drops_unlikely_ones(
    sources, trained_run, tmp_path
):
    directory = distil(data_config(sources, [trained_run]), tmp_path)
    translated = read(f"{directory}/translations.tsv")
    assert read(f"{directory}/train.en") == read(f"{sources}.en")
    assert read(f"{directory}/train.de") == [line.split("\t", 1)[1] for line in translated]
    assert read(f"{directory}/train.de") != read(f"{sources}.de")  # a tiny teacher's German is not the reference
    per_token = sorted(float(line.split("\t", 1)[0]) for line in translated)
    threshold = per_token[LINES // 3]  # drops the third with the lowest log-probability per token
    filtered = distil(data_config(sources, [trained_run], teacher_min_log_prob=threshold), tmp_path)
    assert filtered == directory  # the same translations, filtered again
    kept = read(f"{directory}/train.de")
    assert len(kept) == sum(score >= threshold for score in per_token) < LINES
    assert len(read(f"{directory}/train.en")) == len(kept)


def test_a_changed_teacher_or_changed_sources_translate_again_and_the_same_reuse_the_cache(
    sources, trained_run, tmp_path, caplog
):
    model = str(tmp_path / "teacher")
    shutil.copytree(trained_run, model)
    run_dir = tmp_path / "student"
    first = distil(data_config(sources, [model]), run_dir)
    with caplog.at_level("INFO", logger="mt_transformer"):
        assert distil(data_config(sources, [model]), run_dir) == first
    assert f"translations of {LINES} training sources (cache)" in caplog.text
    assert os.path.isdir(os.path.join(model, "checkpoints"))
    best = [
        os.path.join(root, "model.safetensors") for root, _, files in os.walk(model) if "model.safetensors" in files
    ]
    for path in best:  # the teacher written anew
        os.utime(path, ns=(os.stat(path).st_atime_ns, os.stat(path).st_mtime_ns + 10**9))
    retrained = distil(data_config(sources, [model]), run_dir)
    assert retrained != first
    changed = str(tmp_path / "changed")
    for lang in ("en", "de"):
        lines = read(f"{sources}.{lang}")
        lines[7] = lines[8]
        with open(f"{changed}.{lang}", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    moved = distil(data_config(changed, [model]), run_dir)
    assert moved not in (first, retrained)
    assert read(f"{moved}/train.de")[7] == read(f"{moved}/train.de")[8]


def test_a_stage_killed_mid_way_continues_to_the_same_bytes(sources, trained_run, tmp_path, monkeypatch):
    monkeypatch.setattr(teacher, "TEACHER_WINDOW", 32)  # five windows of the 150 lines
    whole = distil(data_config(sources, [trained_run]), tmp_path / "whole")
    selected, calls = teacher._selected, []

    def killed_in_the_third_window(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a kill would stop it: after two windows were written
        return selected(*args)

    monkeypatch.setattr(teacher, "_selected", killed_in_the_third_window)
    with pytest.raises(KeyboardInterrupt):
        distil(data_config(sources, [trained_run]), tmp_path / "killed")
    partial = [p for p in os.listdir(tmp_path / "killed" / "cache") if p.startswith("teacher-")]
    (name,) = partial
    assert len(read(tmp_path / "killed" / "cache" / name / "translations.tsv.partial")) == 2 * 32
    monkeypatch.setattr(teacher, "_selected", selected)
    calls.clear()
    resumed = distil(data_config(sources, [trained_run]), tmp_path / "killed")
    with open(f"{whole}/translations.tsv", "rb") as a, open(f"{resumed}/translations.tsv", "rb") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize("teacher_path", ["missing", "empty"])
def test_a_bad_teacher_is_one_line_exit_2_and_nothing_written(corpus, tmp_path, teacher_path):
    os.makedirs(tmp_path / "empty")
    out = tmp_path / "student"
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(out)))
    result = run_cli("mt-train", "--config", config, "--set", f"data.teacher={tmp_path / teacher_path}")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: data.teacher: ")
    assert not out.exists()


def test_a_tiny_teacher_teaches_a_student_mixed_with_the_original_pairs(sources, trained_run, tmp_path):
    out = tmp_path / "student"
    corpora = [
        {"src_lang": "en", "tgt_lang": "de", "train": sources, "valid": sources, "teacher": trained_run},
        {"src_lang": "en", "tgt_lang": "de", "train": sources, "tag": "<orig>"},
    ]
    config = tiny_config(sources, str(out), train={"max_steps": 4, "valid_every": 4})
    config["data"] = {**{k: v for k, v in config["data"].items() if k not in ("train", "valid")}, "corpora": corpora}
    config["data"].update(teacher_nbest=2, teacher_select="chrf")
    path = write_config(tmp_path / "c.yaml", config)
    prepared = run_cli("mt-prepare", "--config", path)
    assert prepared.returncode == 0, prepared.stderr
    assert f"data.corpora[0]: translating {LINES} training sources with the teacher" in prepared.stderr
    kept = [int(n) for n in re.findall(r"data\.corpora\[\d\] train: (\d+) pairs", prepared.stderr)]
    assert len(kept) == 2 and f"prepared train {sum(kept)} pairs" in prepared.stdout  # both corpora
    trained = run_cli("mt-train", "--config", path)
    assert trained.returncode == 0, trained.stderr
    assert f"data.corpora[0]: the teacher's translations of {LINES} training sources (cache)" in trained.stderr
    (directory,) = [d for d in os.listdir(out / "cache") if d.startswith("teacher-")]
    hypotheses = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "--nbest",
        "2",
        "-i",
        f"{sources}.en",
        "-o",
        str(tmp_path / "nbest"),
    )
    assert hypotheses.returncode == 0, hypotheses.stderr
    nbest = {}
    for line in read(tmp_path / "nbest"):
        index, _, text = line.split("\t")
        nbest.setdefault(int(index), []).append(text)
    distilled = read(out / "cache" / directory / "train.de")
    assert all(text in nbest[i] for i, text in enumerate(distilled))  # each line one of the teacher's two
    saved = yaml.safe_load((out / "config.yaml").read_text())["data"]
    assert saved["corpora"][0]["teacher"] == [trained_run] and saved["teacher_select"] == "chrf"


def test_the_teacher_translates_clean_sources_and_the_student_learns_them_changed(sources, trained_run, tmp_path):
    out = tmp_path / "student"
    corpus = {"src_lang": "en", "tgt_lang": "de", "train": sources, "valid": sources, "teacher": trained_run}
    config = tiny_config(sources, str(out), train={"max_steps": 2, "valid_every": 2})
    config["data"] = {k: v for k, v in config["data"].items() if k not in ("train", "valid")}
    config["data"]["corpora"] = [{**corpus, "augment": {"upper_case": 1.0}}]
    path = write_config(tmp_path / "c.yaml", config)
    shown = run_cli("mt-prepare", "--config", path, "--show-augmented", "3")
    assert shown.returncode == 0, shown.stderr
    (directory,) = [d for d in os.listdir(out / "cache") if d.startswith("teacher-")]
    distilled = dict(zip(read(out / "cache" / directory / "train.en"), read(out / "cache" / directory / "train.de")))
    assert set(distilled) <= set(read(f"{sources}.en"))  # the teacher read the sources as they are
    examples = [block.splitlines() for block in shown.stdout.split("\n\n")[:3]]
    for pair, changed, _pieces in examples:
        src, tgt = pair.split("\t")
        assert distilled[src] == tgt and changed == f"{src.upper()}\t{tgt.upper()}"  # its translations changed
    trained = run_cli("mt-train", "--config", path)
    assert trained.returncode == 0, trained.stderr


@TORCHRUN
def test_under_torchrun_each_rank_translates_its_windows_and_rank_0_merges_them(sources, trained_run, tmp_path):
    """mt-prepare, as a torchrun job runs it before training; mt-train under torchrun starts
    with the same stage (training/train.py prepare_for_all_ranks)."""
    from test_distributed import finish, mt_train, torchrun

    alone = distil(data_config(sources, [trained_run]), tmp_path / "alone")
    out = tmp_path / "ranks"
    settings = {"max_steps": 1, "valid_every": 1, "max_tokens": 256}
    config = tiny_config(sources, str(out), data={"teacher": [trained_run]}, train=settings)
    config["data"].update(train=sources, valid=sources)
    mt_train()  # installed, and mt-prepare beside it
    stderr = finish(
        torchrun(
            "--standalone", "--nproc-per-node", "2", "mt-prepare", "--config", write_config(tmp_path / "c.yaml", config)
        )
    )
    assert f"translating {LINES} training sources with the teacher" in stderr
    (directory,) = [d for d in os.listdir(out / "cache") if d.startswith("teacher-")]
    assert sorted(os.listdir(out / "cache" / directory)) == [
        OUTPUT_MARKER,
        "pairs.json",
        "train.de",
        "train.en",
        "translations.tsv",
    ]
    with open(f"{alone}/translations.tsv", "rb") as a, open(out / "cache" / directory / "translations.tsv", "rb") as b:
        assert a.read() == b.read()


def test_a_rank_whose_share_was_finished_before_a_stop_does_not_translate_it_again(sources, tmp_path, monkeypatch):
    from mt_transformer.jobs.windows import Shard
    from mt_transformer.processes import Processes

    output = str(tmp_path / "translations.tsv")
    share = Shard(1, 2).path(output)
    with open(share, "w", encoding="utf-8") as f:
        f.write("-0.5000\tfinished\n")
    with open(f"{share}.progress.json", "w", encoding="utf-8") as f:
        json.dump({"format": 1, "done": True, "windows": []}, f)
    monkeypatch.setattr(teacher, "from_environment", lambda: Processes(1, 2, 1))
    monkeypatch.setattr(teacher, "_teacher_translator", lambda *a: pytest.fail("the finished share was begun again"))
    teacher._translate(data_config(sources, ["unused"]), None, "data", None, output, {}, torch.device("cpu"), 1)
    assert read(share) == ["-0.5000\tfinished"]


def test_sigterm_in_the_teacher_stage_stops_mt_train_after_the_window(sources, trained_run, tmp_path, monkeypatch):
    import signal

    monkeypatch.setattr(teacher, "TEACHER_WINDOW", 100)
    selected = teacher._selected

    def signalled(*args):
        os.kill(os.getpid(), signal.SIGTERM)  # arrives while the first window is being translated
        return selected(*args)

    monkeypatch.setattr(teacher, "_selected", signalled)
    out = tmp_path / "student"
    config = tiny_config(sources, str(out), data={"teacher": [trained_run]}, train={"max_steps": 2})
    config["data"].update(train=sources, valid=sources)
    path = write_config(tmp_path / "c.yaml", config)
    stopped = run_cli("mt-train", "--config", path)
    assert stopped.returncode == 128 + signal.SIGTERM
    assert "stopped by SIGTERM after 100 lines; run the same command again to continue" in stopped.stderr
    assert not (out / "checkpoints").exists()
    (partial,) = [d for d in os.listdir(out / "cache") if d.startswith("teacher-")]
    assert len(read(out / "cache" / partial / "translations.tsv.partial")) == 100  # continued as the kill test shows
