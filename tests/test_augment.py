"""data.augment: each modifier on handmade lines, draws that depend on the seed alone, only the
changed pairs encoded anew, the tokenizer's sample with capitals, and training that resumes
exactly (and is today's training where nothing is switched on)."""

import random

import pytest
from test_faults import assert_same_run, losses

from conftest import run_cli, tiny_config, write_config
from mt_transformer.config import AugmentConfig
from mt_transformer.data import augment
from mt_transformer.data.augment import PairAugmenter, TokenizerSample, augment_pair


def test_each_modifier_changes_what_it_says_and_nothing_else():
    rng = random.Random(0)
    always = dict.fromkeys(("upper_case", "title_case", "remove_end_punct", "typos", "noise"), 0.0)

    def only(name, src, tgt, tags=frozenset()):
        return augment_pair(src, tgt, AugmentConfig(**{**always, name: 1.0}), rng, tags)

    assert only("upper_case", "Ein Mann läuft.", "A man runs.") == ("EIN MANN LÄUFT.", "A MAN RUNS.")
    assert only("title_case", "ein mann, der läuft.", "don't run.") == ("Ein Mann, Der Läuft.", "Don't Run.")
    assert only("remove_end_punct", "Wo bist du?", "Where are you?!") == ("Wo bist du", "Where are you")
    assert only("remove_end_punct", "Wo bist du?", "Where are you") == ("Wo bist du?", "Where are you")  # one side
    src, tgt = only("typos", "Ein Mann mit einem orangefarbenen Hut starrt", "A man stares.")
    assert tgt == "A man stares." and src != "Ein Mann mit einem orangefarbenen Hut starrt"
    changed = [(a, b) for a, b in zip(src.split(" "), "Ein Mann mit einem orangefarbenen Hut starrt".split(" "))]
    assert len(src.split(" ")) == 7 and 1 <= sum(a != b for a, b in changed) <= 2  # 15% of 7 words, at least one
    src, tgt = only("noise", "Ein Mann.", "A man.")
    assert src == tgt and src not in ("Ein Mann.", "A man.") and src.strip()
    # a source tag stays as it is
    assert only("upper_case", "<2de> a man", "ein Mann", frozenset({"<2de>"})) == ("<2de> A MAN", "EIN MANN")
    assert only("title_case", "<bt> a man", "ein mann", frozenset({"<bt>"})) == ("<bt> A Man", "Ein Mann")
    assert augment_pair("a b", "c d", AugmentConfig(), rng) == ("a b", "c d")
    source_only = AugmentConfig(upper_case=1.0, title_case=1.0, case_target=False)
    assert augment_pair("ein mann.", "a man.", source_only, rng) == ("EIN MANN.", "a man.")
    assert not AugmentConfig(case_target=False).active
    # every share of the config has its change, in the order the config lists them
    assert list(AugmentConfig().shares) == list(augment.STEPS)


def test_each_kind_of_typo_is_one_letter_away():
    rng = random.Random(1)
    words = {augment.misspell("Haus", rng) for _ in range(200)}
    assert {"aHus", "Hasu", "Hus", "Haaus", "Hauss"} & words  # swaps, drops, doubles
    assert any(len(w) == 5 and w.lower() != "haaus" and w.lower() != "hauss" for w in words)  # an added letter
    assert all(abs(len(w) - 4) <= 1 for w in words)


def test_draws_depend_on_the_seed_alone_and_only_changed_pairs_are_encoded_anew():
    class Encoder:
        alpha = 0.0

        def __init__(self):
            self.calls = []

        def __call__(self, texts, seed=None):
            self.calls.append(texts)
            return {"src_ids": [[len(s)] for s in texts["src"]], "tgt_ids": [[len(t)] for t in texts["tgt"]]}

    rows = {
        "src": [f"ein Mann Nummer {n}." for n in range(40)],
        "tgt": [f"a man number {n}." for n in range(40)],
        "src_ids": [[0]] * 40,
        "tgt_ids": [[0]] * 40,
    }
    setting = AugmentConfig(upper_case=0.2, remove_end_punct=0.2)
    encoder = Encoder()
    first = PairAugmenter(encoder, [setting, AugmentConfig()], [30, 10])(rows, seed=7, indices=range(40))
    again = PairAugmenter(Encoder(), [setting, AugmentConfig()], [30, 10])(rows, seed=7, indices=range(40))
    other = PairAugmenter(Encoder(), [setting, AugmentConfig()], [30, 10])(rows, seed=8, indices=range(40))
    assert first == again and first != other
    changed = [k for k, ids in enumerate(first["src_ids"]) if ids != [0]]
    assert changed and len(encoder.calls) == 1 and len(encoder.calls[0]["src"]) == len(changed)
    assert max(changed) < 30  # the second corpus has no augmentation
    assert all(encoder.calls[0]["src"][i].isupper() or not encoder.calls[0]["src"][i].endswith(".") for i in range(3))


def test_word_alignments_pass_through_modifiers_that_keep_the_words_and_go_where_noise_replaced_the_pair():
    class Encoder:
        alpha = 0.0

        def __call__(self, texts, seed=None):
            return {"src_ids": [[1] for _ in texts["src"]], "tgt_ids": [[1] for _ in texts["tgt"]]}

    rows = {
        "src": [f"ein Mann {n}." for n in range(40)],
        "tgt": [f"a man {n}." for n in range(40)],
        "src_ids": [[0]] * 40,
        "tgt_ids": [[0]] * 40,
        "alignment": [[0, 0, 1, 1, 2, 2]] * 40,
    }
    setting = AugmentConfig(upper_case=0.5, typos=0.5, noise=0.3)
    drawn = PairAugmenter(Encoder(), [setting], [40])(rows, seed=3, indices=range(40))
    augmenter = PairAugmenter(Encoder(), [setting], [40])
    src, tgt = list(rows["src"]), list(rows["tgt"])
    changed, noised = augmenter.change(src, tgt, range(40), random.Random(3))
    assert noised and set(noised) < set(changed)
    assert all(src[k] == tgt[k] for k in noised)  # the noise line on both sides
    assert [k for k, a in enumerate(drawn["alignment"]) if not a] == noised
    assert all(a == [0, 0, 1, 1, 2, 2] for k, a in enumerate(drawn["alignment"]) if k not in noised)


def test_the_tokenizer_sample_adds_capitals_the_same_way_every_pass():
    lines = [f"ein Mann {n}" for n in range(1000)]
    sample = TokenizerSample(lines, upper=0.1, title=0.05, seed=3)
    first, second = list(sample), list(sample)
    assert first == second and first[: len(lines)] != lines
    uppers = [line for line in first if line.isupper()]
    assert 60 <= len(uppers) <= 140
    assert {line for line in uppers} <= {line.upper() for line in lines}  # each after its line
    assert len(first) - len(lines) - len(uppers) > 20  # title-case forms


def run_config(corpus, tmp_path, name, **data):
    train = {"max_steps": 8, "valid_every": 4, "log_every": 1, "max_tokens": 512}
    config = tiny_config(corpus, str(tmp_path / name), train=train, data=data)
    return write_config(tmp_path / f"{name}.yaml", config), tmp_path / name


@pytest.mark.slow  # about 12 s: four short runs
def test_training_with_changed_pairs_resumes_exactly_and_all_zero_is_todays_training(corpus, tmp_path):
    changes = {"augment": {"upper_case": 0.2, "title_case": 0.1, "remove_end_punct": 0.2, "typos": 0.2, "noise": 0.05}}
    whole, whole_dir = run_config(corpus, tmp_path, "whole", **changes)
    assert run_cli("mt-train", "--config", whole).returncode == 0
    split, split_dir = run_config(corpus, tmp_path, "split", **changes)
    assert run_cli("mt-train", "--config", split, "--set", "train.max_steps=4").returncode == 0
    resumed = run_cli("mt-train", "--config", split)
    assert resumed.returncode == 0 and "resuming from" in resumed.stderr
    assert_same_run(split_dir, whole_dir)  # the same changed pairs after the resume
    plain, plain_dir = run_config(corpus, tmp_path, "plain")
    assert run_cli("mt-train", "--config", plain).returncode == 0
    off, off_dir = run_config(corpus, tmp_path, "off", **changes)
    assert run_cli("mt-train", "--config", off, "--set", "data.augment={}").returncode == 0
    assert_same_run(off_dir, plain_dir)  # all zero: the pairs as they are, bit for bit
    assert losses(whole_dir) != losses(plain_dir)


@pytest.mark.parametrize(
    "setting, says",
    [
        (
            "data.augment.uppercase=0.1",
            "data.augment.uppercase: unknown key (valid keys: case_target, inline_tags, noise",
        ),
        ("data.augment.typos=1.5", "data.augment.typos: a share of pairs, between 0 and 1, got 1.5"),
        ("data.augment=0.1", "data.augment: expected a mapping of keys, got 0.1"),
    ],
)
def test_a_bad_modifier_or_share_is_one_line(corpus, tmp_path, setting, says):
    config, run_dir = run_config(corpus, tmp_path, "run")
    result = run_cli("mt-train", "--config", config, "--set", setting)
    assert result.returncode == 2 and result.stderr.strip().startswith(f"error: {says}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not run_dir.exists()


def test_mt_prepare_shows_the_pairs_as_they_are_changed(corpus, tmp_path):
    config, run_dir = run_config(corpus, tmp_path, "run", augment={"upper_case": 0.5})
    result = run_cli("mt-prepare", "--config", config, "--show-augmented", "3")
    assert result.returncode == 0, result.stderr
    shown = result.stdout.split("\n\n")[:3]
    for example in shown:
        before, after, pieces = example.splitlines()
        assert after == before.upper() and pieces.replace(" ", "").replace("▁", "") == after.split("\t")[0].replace(
            " ", ""
        )
    off = run_cli("mt-prepare", "--config", config, "--show-augmented", "3", "--set", "data.augment={}")
    assert off.returncode == 2 and "data.augment changes no pair" in off.stderr


def test_inline_tags_wrap_a_source_span_and_the_target_words_aligned_to_it_and_keep_the_word_count():
    src, tgt = "ich kaufte drei rote äpfel .", "i bought three red apples ."
    alignment = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    setting = AugmentConfig(inline_tags=1.0)
    seen = set()
    for seed in range(40):
        new_src, new_tgt = augment._modified(src, tgt, setting, random.Random(seed), frozenset(), alignment)[:2]
        assert len(new_src.split()) == 6 and len(new_tgt.split()) == 6  # the alignment still holds
        opened = [w for w in new_src.split() if w.startswith("<")][0]
        tag = opened[1 : opened.index(">")]
        first = next(k for k, w in enumerate(new_src.split()) if w.startswith(f"<{tag}>"))
        last = next(k for k, w in enumerate(new_src.split()) if w.endswith(f"</{tag}>"))
        assert tag in augment.INLINE_TAGS and 0 <= last - first < augment.LONGEST_TAGGED
        # a one-to-one alignment: the target's element wraps the same positions
        assert new_tgt.split()[first].startswith(f"<{tag}>") and new_tgt.split()[last].endswith(f"</{tag}>")
        seen.add((first, last))
    assert len(seen) > 5
    # crossing links (words 1 and 2 swap sides): "a b" maps to x..z, which holds y, aligned to c: never wrapped
    crossing = [0, 0, 1, 2, 2, 1]
    placed = 0
    for seed in range(40):
        new_src, new_tgt = augment._modified("a b c", "x y z", setting, random.Random(seed), frozenset(), crossing)[:2]
        if new_src != "a b c":
            assert "<" in new_tgt and new_tgt.count("<") == 2
            inside = [k for k, w in enumerate(new_src.split()) if "<" in w]
            assert inside != [0, 1]
            placed += 1
    assert placed == 40  # inline_tags 1.0, and "a", "b", "c", "b c" can each be wrapped: a tag every time
    # no alignment: nothing to wrap
    assert augment._modified(src, tgt, setting, random.Random(0), frozenset())[:2] == (src, tgt)


def test_the_tokenizer_sample_adds_tagged_lines_for_inline_tags():
    lines = [f"ein Mann {n}" for n in range(1000)]
    sample = list(TokenizerSample(lines, upper=0.0, title=0.0, seed=3, inline=0.1))
    tagged = [line for line in sample if "<" in line]
    assert 60 < len(tagged) < 140 and len(sample) == 1000 + len(tagged)
    assert all(line.count("</") == 1 for line in tagged)
