"""data.clean's stage: duplicates and repeated lines over a corpus, language identification offline,
the stage inside mt-prepare (cached, off with clean: {}), and mt-clean on hostile files."""

import json
import os

import numpy as np

from conftest import run_cli, tiny_config, write_config
from mt_transformer.config import CleanConfig, CorpusConfig
from mt_transformer.data.cleaning import clean_pairs
from mt_transformer.data.corpus import pairs_to_clean


def pairs_of(rows):
    from datasets import Dataset

    return Dataset.from_dict({"src": [s for s, _ in rows], "tgt": [t for _, t in rows]})


def read(path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


RULES = CleanConfig(language_id=None)


def test_duplicates_keep_the_first_and_lines_repeated_with_many_partners_are_boilerplate(tmp_path):
    rows = [(f"Satz Nummer {w} hier.", f"Sentence number {w} here.") for w in "abcdefgh"]
    rows += [("Satz Nummer a hier.", "Sentence number a here.")]  # an exact duplicate
    rows += [("Ein anderer Satz a.", "Sentence number a here.")]  # another source, the same target
    rows += [(f"Klicken Sie hier {w}.", "Click here.") for w in "xyz"]  # one target, three partners
    settings = CleanConfig(language_id=None, max_repeats=2, dedup_targets=True)
    report = clean_pairs(pairs_of(rows), settings, "de", "en", str(tmp_path / "o"))
    assert report["dropped"] == {"repeated": 3, "duplicate_pair": 1, "duplicate_target": 1}
    assert read(tmp_path / "o.en") == [t for _, t in rows[:8]] and report["kept"] == 8
    assert report["examples"]["duplicate_target"] == [[10, "Ein anderer Satz a.", "Sentence number a here."]]


def test_a_value_holding_a_line_feed_stays_one_pair_and_the_stage_leaves_only_its_output(tmp_path):
    rows = [{"de": "Ein Satz\nin zwei Zeilen.", "en": "A sentence\non two lines."}]
    rows += [{"de": "Noch einer.", "en": "One more."}]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    pairs = pairs_to_clean(CorpusConfig(format="jsonl", train=str(path), src_lang="de", tgt_lang="en"), "data")
    for repaired in (True, False):  # with repair off, normalize alone makes the line feed a space
        out = tmp_path / str(repaired)
        out.mkdir()
        report = clean_pairs(pairs, CleanConfig(language_id=None, repair=repaired), "de", "en", str(out / "o"))
        assert report["kept"] == 2 and read(out / "o.en") == ["A sentence on two lines.", "One more."]
        assert sorted(os.listdir(out)) == ["o.de", "o.en"]


def test_a_side_far_longer_than_its_corpus_is_sentences_glued_together(tmp_path):
    rows = [(f"Ein kurzer Satz Nummer {i}.", f"A short sentence number {i}.") for i in range(20)]
    glued = (" ".join(s for s, _ in rows[:6]), " ".join(t for _, t in rows[:6]))
    report = clean_pairs(pairs_of([*rows, glued]), RULES, "de", "en", str(tmp_path / "o"))
    assert report["dropped"] == {"long": 1} and report["examples"]["long"] == [[21, *glued]]
    wider = CleanConfig(language_id=None, max_median_ratio=8)
    report = clean_pairs(pairs_of([*rows, glued]), wider, "de", "en", str(tmp_path / "w"))
    assert report["dropped"] == {}


def test_language_identification_reads_the_model_in_the_wheel_and_never_downloads(tmp_path, monkeypatch):
    import socket

    def no_network(*args, **keys):
        raise AssertionError("the language model was fetched")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    from mt_transformer.data.language_id import another_language

    german = ["Zwei Hunde spielen im Schnee.", "Die Kinder laufen über die Wiese.", "Ich habe heute keine Zeit."]
    english = ["Two dogs are playing in the snow.", "The children run across the meadow.", "I have no time today."]
    french = ["Deux chiens jouent dans la neige.", "Les enfants courent dans le pré.", "Je n'ai pas le temps."]
    assert another_language(german, "de", 0.5) == [False] * 3
    assert another_language(english, "eng_Latn", 0.5) == [False] * 3
    assert another_language(french, "en", 0.5) == [True] * 3
    # lines the small model spreads over several languages, its own among them, are not another
    spread = ["The blue table costs 70 euros.", "A person riding a bike on a snowy road."]
    assert another_language(spread, "en", 0.5) == [False, False]
    assert another_language(["Bonjour", "Paris 2020"], "en", 0.5) == [False, False]  # too short to judge
    rows = list(zip(german, english)) + list(zip(german, french))
    report = clean_pairs(pairs_of(rows), CleanConfig(), "de", "en", str(tmp_path / "o"))
    assert report["dropped"] == {"language": 3} and read(tmp_path / "o.en") == english


def test_close_relatives_pass_as_the_language_and_one_the_model_lacks_is_not_judged():
    from mt_transformer.data.language_id import accepted, another_language

    assert {"no", "da", "sv"} <= accepted("nb") and accepted("deu_Latn") == {"de"} and "pt" in accepted("pb")
    assert another_language(["Das isch e schöne Tag gsi hüt."], "gsw_Latn", 0.5) == [False]  # not one of its 176
    assert another_language(["Jeg har ikke tid i dag, beklager."], "nb", 0.5) == [False]  # Danish or Norwegian
    assert another_language(["Jeg har ikke tid i dag, beklager."], "de", 0.5) == [True]


def test_a_rule_that_drops_every_pair_is_one_line_naming_it(corpus, tmp_path):
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run")))
    result = run_cli("mt-prepare", "--config", config, "--set", "data.clean.max_words=1")
    assert result.returncode == 2
    assert "data.clean: every training pair was dropped, 2000 by too_many_words" in result.stderr, result.stderr


def defaults(corpus: str, run) -> dict:
    """The tiny config with data.clean's defaults (the other tests leave the pairs as they are)."""
    config = tiny_config(corpus, str(run))
    del config["data"]["clean"]
    return config


def test_mt_prepare_cleans_once_keeps_the_report_and_clean_off_prepares_as_without_the_stage(corpus, tmp_path):
    from mt_transformer.config import load_config
    from mt_transformer.data.prepare import prepare_data

    run = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", defaults(corpus, run))
    for _ in range(2):
        result = run_cli("mt-prepare", "--config", config)
        assert result.returncode == 0, result.stderr
    report = json.loads((run / "cleaning.json").read_text())["data"]
    assert report["pairs"] == 2000 and report["kept"] + sum(report["dropped"].values()) == 2000
    assert result.stderr.count("cleaning kept") == 1 and len(list((run / "cache").glob("clean-*"))) == 1

    off = tmp_path / "off"
    result = run_cli("mt-prepare", "--config", config, "--set", f"train.output_dir={off}", "data.clean={}")
    assert result.returncode == 0, result.stderr and not (off / "cleaning.json").exists()
    data = load_config(config, [f"train.output_dir={tmp_path / 'plain'}", "data.clean={}"]).data
    _, plain, _ = prepare_data(data, str(tmp_path / "plain"), seed=3)
    _, cleaned_off, _ = prepare_data(data, str(off), seed=3)
    assert plain["train"]["src_ids"] == cleaned_off["train"]["src_ids"] and not list(off.glob("cache/clean-*"))


def test_a_stage_killed_part_way_leaves_nothing_and_the_next_run_cleans_whole(corpus, tmp_path, monkeypatch):
    from mt_transformer.data import cleaning

    real = cleaning.clean_pairs

    def killed(pairs, settings, src_lang, tgt_lang, out_prefix, **keys):
        with open(f"{out_prefix}.{src_lang}", "w") as f:
            f.write("half\n")
        raise KeyboardInterrupt

    config = write_config(tmp_path / "c.yaml", defaults(corpus, tmp_path / "run"))
    monkeypatch.setattr(cleaning, "clean_pairs", killed)
    assert run_cli("mt-prepare", "--config", config).returncode == 130
    assert not [p for p in os.listdir(tmp_path / "run" / "cache") if "clean-" in p]
    monkeypatch.setattr(cleaning, "clean_pairs", real)
    assert run_cli("mt-prepare", "--config", config).returncode == 0


def test_mt_clean_on_hostile_files(tmp_path):
    src, tgt = tmp_path / "in.de", tmp_path / "in.en"
    src.write_bytes(b"\xef\xbb\xbfEin Haus\x00 steht hier.\nZwei\rHunde spielen heute.\n" + b"x" * 10_000_000 + b"\n")
    tgt.write_bytes(b"A house stands here.\nTwo dogs play today.\nOne line.\n")
    out = tmp_path / "out"
    args = ["--src", str(src), "--tgt", str(tgt), "--src-lang", "de", "--tgt-lang", "en", "-o", str(out)]
    result = run_cli("mt-clean", *args, "--show", "1", "--plot", str(tmp_path / "drops.png"))
    assert result.returncode == 0, result.stderr
    assert read(tmp_path / "out.de") == ["Ein Haus steht hier.", "Zwei Hunde spielen heute."]
    assert "word_too_long\t" in result.stdout and (tmp_path / "drops.png").stat().st_size > 0
    assert run_cli("mt-clean", *args).returncode == 0  # its own earlier output is replaced
    src.write_bytes(b"Ein Haus steht hier.\nEin \xffHaus\n")  # a line that is not UTF-8: counted, dropped
    tgt.write_bytes(b"A house stands here.\nA house.\n")
    result = run_cli("mt-clean", *args, "--show", "1")
    assert result.returncode == 0 and "encoding\t2\tEin \ufffdHaus\tA house." in result.stdout, result.stderr
    assert json.loads((tmp_path / "out.report.json").read_text())["dropped"] == {"encoding": 1}
    src.write_bytes(b"a\n")
    tgt.write_bytes(b"a\nb\n")
    result = run_cli("mt-clean", *args)
    assert result.returncode == 2 and "has 1 lines but" in result.stderr.strip().splitlines()[-1], result.stderr
    for extra, says in (
        (["--set", "data.clean.bogus=1"], "data.clean.bogus: unknown key"),
        (["--set", "data.clean.language_id=3"], "data.clean.language_id: must be from 0 to 1"),
        (["--set", "data.clean.lexical=0.5"], "data.clean.lexical: must be"),
        (["--set", "data.clean.lexical=x"], "data.clean.lexical"),
    ):
        result = run_cli("mt-clean", *args, *extra)
        assert result.returncode == 2 and says in result.stderr, result.stderr
    (tmp_path / "mine.de").write_text("my own\n")
    result = run_cli("mt-clean", *args[:-1], str(tmp_path / "mine"))
    assert result.returncode == 2 and "no earlier mt-clean wrote it" in result.stderr
    result = run_cli("mt-clean", *args[:-1], str(tmp_path / "in"))
    assert result.returncode == 2 and "is an input" in result.stderr


def test_a_teacher_translates_the_cleaned_sources(trained_run, corpus, tmp_path):
    import torch

    from mt_transformer.config import DataConfig
    from mt_transformer.data.cleaning import cleaned_corpora
    from mt_transformer.training import teacher

    sources, targets = read(f"{corpus}/train.en")[:40], read(f"{corpus}/train.de")[:40]
    for lang, lines in (("en", sources + sources[:5]), ("de", targets + targets[:5])):  # 5 duplicates
        (tmp_path / f"t.{lang}").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    data = DataConfig(src_lang="en", tgt_lang="de", train=str(tmp_path / "t"), teacher=(trained_run,))
    cleaned = cleaned_corpora(data, str(tmp_path / "run"))
    kept = read(f"{cleaned['data'].train}.en")
    assert len(kept) <= 40 and json.loads((tmp_path / "run" / "cleaning.json").read_text())["data"]["pairs"] == 45
    distilled = teacher.distilled_corpora(data, str(tmp_path / "run"), torch.device("cpu"), sources=cleaned)
    assert read(f"{distilled['data'].train}.en") == kept and not distilled["data"].teacher


def test_model_scoring_drops_the_worst_share_and_a_duplicate_target_keeps_its_best_scored_pair(tmp_path):
    rows = [(f"Satz Nummer {w} hier.", f"Sentence number {w} here.") for w in "abcdefgh"]
    rows += [("Ein anderer Satz, Nummer b.", "Sentence number b here."), ("", "Empty.")]
    cost = {s: float(i) for i, (s, _) in enumerate(rows)} | {rows[8][0]: -1.0}  # the other b: the best
    seen = []

    def scorer(sources, targets):
        seen.extend(sources)
        return np.array([cost[s] for s in sources])

    settings = CleanConfig(language_id=None, scorers=("models",), score_drop=0.2)  # dedup_targets: on with scorers
    report = clean_pairs(pairs_of(rows), settings, "de", "en", str(tmp_path / "o"), scorer=scorer)
    assert report["dropped"] == {"empty": 1, "score": 2, "duplicate_target": 1} and "" not in seen
    assert report["examples"]["score"] == [[7, *rows[6]], [8, *rows[7]]]
    assert read(tmp_path / "o.de") == [rows[i][0] for i in (0, 2, 3, 4, 5, 8)]
    clean_pairs(pairs_of(rows), CleanConfig(language_id=None, dedup_targets=True), "de", "en", str(tmp_path / "f"))
    assert read(tmp_path / "f.de") == [s for s, _ in rows[:8]]  # without scores: the first kept


def test_mt_prepare_scores_with_a_checkpoint_and_refuses_a_missing_one(trained_run, corpus, tmp_path):
    config = write_config(tmp_path / "c.yaml", tiny_config(corpus, str(tmp_path / "run")))
    rules = ["data.clean.language_id=null", "data.clean.score_drop=0.25"]
    result = run_cli("mt-prepare", "--config", config, "--set", f"data.clean.scorers=[{trained_run}]", *rules)
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "run" / "cleaning.json").read_text())["data"]
    later = ("score", "duplicate_target")  # the reasons after scoring
    scored = report["pairs"] - sum(n for reason, n in report["dropped"].items() if reason not in later)
    assert report["dropped"]["score"] == round(0.25 * scored) and report["settings"]["scorers"] == [trained_run]
    missing = str(tmp_path / "nowhere")
    result = run_cli("mt-prepare", "--config", config, "--set", f"data.clean.scorers=[{missing}]")
    assert (
        result.returncode == 2
        and f"data.clean.scorers[0]: no such checkpoint or run directory: {missing}"
        in (result.stderr.strip().splitlines()[-1])
    ), result.stderr
