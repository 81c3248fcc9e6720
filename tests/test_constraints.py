"""Lexical constraints: phrases every translation holds or avoids, by dynamic beam allocation."""

import logging
import random

import pytest

from conftest import run_cli, translator
from mt_transformer.decoding.constraints import Constraints, PieceIndex, Progress, split_constraints
from mt_transformer.errors import UserError


def read(path: str, n: int | None = None) -> list[str]:
    return open(path, encoding="utf-8").read().splitlines()[:n]


class Vocabulary:
    """A sentencepiece processor's interface to a given list of pieces (ids 0-2: control pieces)."""

    def __init__(self, pieces: list[str]):
        self.pieces = ["<pad>", "<s>", "</s>"] + pieces

    def get_piece_size(self):
        return len(self.pieces)

    def id_to_piece(self, i):
        return self.pieces[i]

    def is_control(self, i):
        return i < 3

    def is_unknown(self, i):
        return False

    def is_byte(self, i):
        return False


def test_progress_through_phrases_counts_subwords_and_restarts_a_broken_phrase():
    c = Constraints(include=((5, 6, 7), (9,)))
    index = PieceIndex(Vocabulary([f"▁w{i}" for i in range(3, 10)]))
    p = Progress()
    assert sorted(p.wanted(c)) == [5, 9] and p.bank(c) == 0 and not p.complete(c)
    p = p.advance(5, "▁w5", c).advance(6, "▁w6", c)
    assert p.wanted(c) == [7] and p.bank(c) == 2
    broken = p.advance(5, "▁w5", c)  # the phrase is left: its subwords count no more, and 5 starts it again
    assert broken.bank(c) == 1 and broken.wanted(c) == [6]
    p = p.advance(7, "▁w7", c).advance(9, "▁w9", c)
    assert p.complete(c) and p.bank(c) == 4 and p.banned(c, index) == []


def test_a_phrase_to_avoid_is_banned_however_it_is_split():
    pieces = ["▁red", "▁re", "d", "▁app", "le", "▁apple", "▁apples", "s", "▁a", "pple", "▁", "r", "ed"]
    index = PieceIndex(Vocabulary(pieces))
    ids = {piece: i + 3 for i, piece in enumerate(pieces)}
    c = Constraints(avoid=("▁red▁apple",))
    state = Progress()
    assert state.banned(c, index) == []
    for piece in ("▁", "r", "ed"):
        state = state.advance(ids[piece], piece, c)
    assert sorted(state.banned(c, index)) == sorted(ids[p] for p in ("▁apple", "▁apples"))
    state = state.advance(ids["▁a"], "▁a", c)
    assert state.banned(c, index) == [ids["pple"]]
    single = Constraints(avoid=("▁apple",))  # at a word start, as a word or its beginning ("apples")
    assert sorted(Progress().banned(single, index)) == sorted(ids[p] for p in ("▁apple", "▁apples"))
    assert Constraints(avoid=("▁red",)).met_by([], ["▁a", "▁b"])
    assert not Constraints(avoid=("▁red",)).met_by([], ["▁a", "▁", "re", "d"])


def test_phrases_go_to_the_first_part_with_room_and_avoided_ones_to_every_part():
    c = Constraints(include=((1, 2, 3), (4, 5), (6,)), avoid=("▁red",))
    parts = split_constraints(c, [4, 10])
    assert [p.include for p in parts] == [((1, 2, 3), (6,)), ((4, 5),)]
    assert all(p.avoid == ("▁red",) for p in parts)


def random_constraints(references: list[str], outputs: list[str], seed: int):
    """Per line 0-2 phrases (of one or two words) of the reference, and sometimes a word of the
    unconstrained output to avoid (one that no phrase to include holds)."""
    rng = random.Random(seed)
    include, avoid = [], []
    for reference, output in zip(references, outputs):
        words = reference.rstrip(".").split()
        phrases = []
        for _ in range(rng.choice([0, 1, 1, 2])):
            start = rng.randrange(len(words))
            phrases.append(" ".join(words[start : start + rng.choice([1, 2])]))
        include.append(phrases)
        candidates = [w for w in output.rstrip(".").split() if not any(w in p for p in phrases)]
        avoid.append([rng.choice(candidates)] if candidates and rng.random() < 0.5 else [])
    return include, avoid


@pytest.mark.parametrize("beam,nbest,seed", [(3, 1, 0), (4, 2, 1)])
def test_every_phrase_to_include_appears_in_every_output_and_none_to_avoid(trained_run, corpus, beam, nbest, seed):
    lines, references = read(f"{corpus}/test.en"), read(f"{corpus}/test.de")
    translate = translator(trained_run, beam_size=beam, n_best=nbest, max_len_b=20)
    plain = translate(lines)
    include, avoid = random_constraints(references, [r[0].text for r in plain], seed)
    constrained = translate(lines, constraints=(include, avoid))
    encode = translate.tokenizer.tgt.encode
    changed = 0
    for line, results in enumerate(constrained):
        assert 1 <= len(results) <= nbest
        for result in results:
            for phrase in include[line]:
                assert phrase in result.text, (line, phrase, result.text)
            for phrase in avoid[line]:
                assert f" {phrase}" not in f" {result.text}", (line, phrase, result.text)
            c = Constraints(tuple(tuple(encode(p)) for p in include[line]))
            assert c.unmet(result.tokens) == 0
        changed += results[0].text != plain[line][0].text
    assert changed > len(lines) // 4  # the constraints were not all met already


def test_no_constraints_translate_exactly_as_without_and_met_ones_change_nothing(trained_run, corpus):
    lines = read(f"{corpus}/test.en")
    translate = translator(trained_run, beam_size=3, n_best=2)
    plain = translate(lines)
    empty = translate(lines, constraints=([[]] * len(lines), [[]] * len(lines)))
    assert [[(t.text, t.score) for t in r] for r in empty] == [[(t.text, t.score) for t in r] for r in plain]
    # a word both of the best translations hold already, and a word neither holds, to avoid
    include = [[next((w for w in r[0].text.split() if w in r[1].text.split()), "")] for r in plain]
    avoid = [["Zebra"] for _ in plain]
    again = translate(lines, constraints=(include, avoid))
    assert [[(t.text, t.score) for t in r] for r in again] == [[(t.text, t.score) for t in r] for r in plain]


def test_batch_composition_changes_no_line(trained_run, corpus):
    lines, references = read(f"{corpus}/test.en", 16), read(f"{corpus}/test.de", 16)
    translate = translator(trained_run, beam_size=3)
    include, avoid = random_constraints(references, [r[0].text for r in translate(lines)], seed=2)
    together = translate(lines, constraints=(include, avoid))
    one_by_one = [translate([line], constraints=([i], [a]))[0] for line, i, a in zip(lines, include, avoid)]
    small = translator(trained_run, beam_size=3, max_tokens=40)(lines, constraints=(include, avoid))
    assert [r[0].text for r in together] == [r[0].text for r in one_by_one] == [r[0].text for r in small]


def test_constraints_with_an_ensemble_target_tags_and_inputs_cut_in_parts(trained_run, corpus, caplog):
    lines, references = read(f"{corpus}/test.en", 6), read(f"{corpus}/test.de", 6)
    include = [[r.split()[-1].rstrip(".")] for r in references]
    ensemble = translator([trained_run, trained_run], beam_size=3)
    for line, result in zip(include, ensemble(lines, constraints=(include, [[]] * 6))):
        assert line[0] in result[0].text
    long_line = " ".join(lines)
    phrases = [include[0][0], include[5][0]]
    with caplog.at_level(logging.WARNING, logger="mt_transformer"):
        (cut,) = translator(trained_run, beam_size=3, max_input_len=20)([long_line], constraints=([phrases], [[]]))
    assert "translated in" in caplog.text and "parts" in caplog.text
    assert all(p in cut[0].text for p in phrases)


def test_phrases_that_cannot_all_be_met_leave_the_unconstrained_translation_and_a_warning(trained_run, corpus, caplog):
    lines = read(f"{corpus}/test.en", 3)
    translate = translator(trained_run, beam_size=3)
    plain = translate(lines)
    word = plain[1][0].text.split()[0]
    with caplog.at_level(logging.WARNING, logger="mt_transformer"):
        got = translate(lines, constraints=([[], [word], []], [[], [word], []]))  # include and avoid the same word
    assert "line 2: no translation within the length limit holds every phrase" in caplog.text
    assert [r[0].text for r in got] == [r[0].text for r in plain]


def test_greedy_and_sampling_refuse_what_they_cannot_plan_for(trained_run, corpus):
    lines = read(f"{corpus}/test.en", 3)
    with pytest.raises(UserError, match="--constraints: needs beam search"):
        translator(trained_run, beam_size=1)(lines, constraints=([["Tom"]] * 3, [[]] * 3))
    with pytest.raises(UserError, match="not with --sampling"):
        translator(trained_run, sampling=True, beam_size=1)(lines, constraints=([[]] * 3, [["Tom"]] * 3))
    # phrases to avoid need no planning: greedy search keeps to them
    plain = translator(trained_run, beam_size=1)(lines)
    avoid = [[r[0].text.split()[0]] for r in plain]
    for words, result in zip(avoid, translator(trained_run, beam_size=1)(lines, constraints=([[]] * 3, avoid))):
        assert f" {words[0]}" not in f" {result[0].text}"


def test_mt_translate_reads_constraints_and_refuses_bad_files(trained_run, corpus, tmp_path):
    lines = read(f"{corpus}/test.en", 3)
    source = tmp_path / "in.en"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    good = tmp_path / "good"
    good.write_text("Tom\tApfel\n\nrot\n", encoding="utf-8")
    out = tmp_path / "out"
    common = ["--checkpoint", trained_run, "-i", str(source)]
    result = run_cli("mt-translate", *common, "--beam", "3", "--constraints", str(good), "-o", str(out))
    assert result.returncode == 0, result.stderr
    first, _, third = out.read_text(encoding="utf-8").splitlines()
    assert "Tom" in first and "Apfel" in first and "rot" in third

    short = tmp_path / "short"
    short.write_text("Tom\n", encoding="utf-8")
    huge = tmp_path / "huge"
    huge.write_text("\n".join(["Tom"] + ["Apfel " * 40] * 2) + "\n", encoding="utf-8")
    unknown = tmp_path / "unknown"
    unknown.write_text("\n\n漢字\n", encoding="utf-8")
    for flags, message in [
        (["--constraints", str(short)], f"error: --constraints: {short} has 1 lines, the input 3"),
        (["--avoid", str(short)], f"error: --avoid: {short} has 1 lines, the input 3"),
        (["--constraints", str(huge)], "error: --constraints: line 2: its phrases take"),
        (["--constraints", str(unknown)], "error: --constraints: line 3: '漢字' has characters the target"),
        (["--constraints", str(good), "--beam", "1"], "error: --constraints: needs beam search"),
        (["--avoid", str(good), "--sampling"], "error: --constraints and --avoid: for beam search"),
    ]:
        result = run_cli("mt-translate", *common, *flags, "-o", str(tmp_path / "never"))
        assert result.returncode == 2, result.stderr
        assert result.stderr.strip().splitlines()[-1].startswith(message)
        assert not (tmp_path / "never").exists()
