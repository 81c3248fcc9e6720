"""data.clean.lexical: IBM Model 1 learns which words translate which from a corpus's own pairs,
exactly and the same on every run, and the stage drops the pairs whose words do not translate."""

import random

import numpy as np

from mt_transformer.config import CleanConfig
from mt_transformer.data import lexical
from mt_transformer.data.cleaning import clean_pairs
from mt_transformer.data.corpus import TextPairs
from mt_transformer.data.lexical import Words

WORDS = 300  # each source word translates to one target word


def word(i: int, side: str) -> str:
    """The i-th word of a side: letters only ("w" + i in base 26), so no rule of form judges it."""
    return side + "".join(chr(97 + int(d, 26)) for d in np.base_repr(i, 26))


def sentence_pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """Pairs of 4-9 words, each source word's translation in the target, in a shuffled order."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        picked = [rng.randrange(WORDS) for _ in range(rng.randint(4, 9))]
        order = rng.sample(picked, len(picked))
        pairs.append((" ".join(word(i, "w") for i in picked), " ".join(word(i, "t") for i in order)))
    return pairs


def test_model_1_learns_each_word_translation_and_scores_alike_on_each_run():
    pairs = sentence_pairs(3_000)
    # each word beside its translation, then beside another's
    probes = [(word(i, "w"), word(i, "t")) for i in range(20, 40)] + [
        (word(i, "w"), word(i + 1, "t")) for i in range(20, 40)
    ]
    found = lexical.scores(pairs + probes, "de", "en")
    right, wrong = found[-40:-20], found[-20:]
    judged = ~np.isnan(right) & ~np.isnan(wrong)  # a word among the 10 most frequent is left out
    assert judged.sum() >= 15 and (right[judged] > wrong[judged]).all()
    assert np.array_equal(found, lexical.scores(pairs + probes, "de", "en"), equal_nan=True)
    misaligned = [(s, pairs[k + 7][1]) for k, (s, _) in enumerate(pairs[:200])]
    found = lexical.scores(pairs + misaligned, "de", "en")
    assert np.median(found[-200:]) < np.min(found[:200])


def test_a_word_rare_or_never_seen_carries_no_evidence_and_a_script_without_spaces_counts_letters(monkeypatch):
    odd = [("wzz wzy", "tzz tzy"), (" ".join(word(i, "w") for i in range(4)), "Zyx Wvu"), ("wb wc", ""), ("wb", "tzz")]
    assert np.isnan(lexical.scores(sentence_pairs(1_500) + odd, "de", "en")[-4:]).all()  # seen once: too rare
    monkeypatch.setattr(lexical, "COMMON", 0)
    monkeypatch.setattr(lexical, "RARE", 1)
    assert [list(ids) for ids in Words("en").learned(["我爱你 abc"])[0]] == [[1, 2]]


def test_the_stage_drops_pairs_whose_words_do_not_translate(tmp_path, monkeypatch):
    pairs = sentence_pairs(2_000)
    rng = random.Random(1)
    noisy = list(pairs)
    misaligned = [(pairs[k][0], pairs[(k + rng.randrange(5, 50)) % len(pairs)][1]) for k in range(0, 2_000, 20)]
    for pair in misaligned:
        noisy.insert(rng.randrange(len(noisy)), pair)
    for side, k in (("de", 0), ("en", 1)):
        (tmp_path / f"in.{side}").write_text("".join(p[k] + "\n" for p in noisy), encoding="utf-8")
    corpus = TextPairs(str(tmp_path / "in.de"), str(tmp_path / "in.en"))
    settings = CleanConfig(language_id=None, copy_words=None, max_repeats=None, min_script_share=None)
    monkeypatch.setattr(lexical, "OPEN", 2)
    monkeypatch.setattr(lexical, "RARE", 5)  # a part of ~700 pairs sees each of the 300 words ~15 times
    learned, scores = [], lexical.scores
    monkeypatch.setattr(lexical, "scores", lambda pairs, *langs: learned.append(len(pairs)) or scores(pairs, *langs))
    for links, parts in ((lexical.LINKS, 1), (30_000, 3)):  # 3 parts: two written in one pass over the pairs, then one
        monkeypatch.setattr(lexical, "LINKS", links)
        report = clean_pairs(corpus, settings, "de", "en", str(tmp_path / "out"))
        assert len(learned) == parts and sum(learned) == report["pairs"] - report["dropped"].get("duplicate_pair", 0)
        learned.clear()
        kept = set(zip(*(tmp_path.joinpath(f"out.{side}").read_text().splitlines() for side in ("de", "en"))))
        assert sum(pair not in kept for pair in misaligned) >= 0.8 * len(misaligned), links
        assert sum(pair in kept for pair in pairs) >= 0.99 * len(pairs), links
        assert report["dropped"]["lexical"] == len(noisy) - report["kept"]
    few = clean_pairs(TextPairs(*_write(tmp_path, noisy[:900])), settings, "de", "en", str(tmp_path / "few"))
    assert "lexical" not in few["dropped"]  # under 1,000 pairs: too few to learn from


def _write(tmp_path, pairs):
    paths = (str(tmp_path / "f.de"), str(tmp_path / "f.en"))
    for path, k in zip(paths, (0, 1)):
        with open(path, "w", encoding="utf-8") as f:
            f.write("".join(p[k] + "\n" for p in pairs))
    return paths


def test_parts_follow_the_links_a_pair_makes_and_a_script_without_spaces_counts_each_letter(monkeypatch):
    lengths = np.array([[60, 60]] * 1_000)  # ~10 words a side: (10 + 2) x (10 + 1) links a pair, estimated
    open_ = np.ones(len(lengths), dtype=bool)
    open_[::2] = False  # only the open pairs count, and only they get a part
    monkeypatch.setattr(lexical, "LINKS", 500 * 132)
    part, count = lexical.parts(lengths, open_, ("de", "en"))
    assert count == 1 and (part[open_] == 0).all() and (part[~open_] == -1).all()
    part, count = lexical.parts(lengths, open_, ("zh", "en"))  # 60 letters: 60 words
    assert count == -(-500 * 62 * 11 // (500 * 132)) and set(part[open_]) == set(range(count))
    assert np.array_equal(part, lexical.parts(lengths, open_, ("zh", "en"))[0])  # the same draw each time
