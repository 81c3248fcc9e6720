"""Scoring given translations: teacher-forced log-probabilities, batched, in input order."""

import pytest
import torch

from conftest import run_cli, token_log_probs, translator
from mt_transformer.decoding.ensemble import Ensemble
from mt_transformer.decoding.scoring import score_lines
from mt_transformer.evaluation.teacher_forcing import teacher_forced_log_probs


def read(path: str, n: int) -> list[str]:
    return open(path, encoding="utf-8").read().splitlines()[:n]


def test_scores_are_the_teacher_forced_log_probabilities_of_each_pair(trained_run, corpus):
    sources, targets = read(f"{corpus}/test.en", 12), read(f"{corpus}/test.de", 12)
    targets[3] = ""  # an empty translation: the EOS alone is scored
    scorer = translator(trained_run, max_tokens=60)  # several batches of pairs of different lengths
    scores = score_lines(scorer, sources, targets)
    tokenizer = scorer.tokenizer
    for score, src, tgt in zip(scores, tokenizer.encode_src(sources), tokenizer.tgt.encode(targets)):
        expected = token_log_probs(scorer.model, src, tgt)
        assert len(score.token_log_probs) == len(tgt) + 1
        assert torch.allclose(torch.tensor(score.token_log_probs), expected, atol=1e-4)
        assert score.log_prob == pytest.approx(float(expected.sum()), abs=1e-4)
        assert score.per_token == pytest.approx(float(expected.sum()) / (len(tgt) + 1), abs=1e-4)
    swapped = score_lines(scorer, sources[::-1], targets[::-1])
    assert [s.log_prob for s in swapped] == pytest.approx([s.log_prob for s in scores[::-1]], abs=1e-5)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_the_score_of_the_greedy_output_is_what_greedy_search_reported(trained_run, corpus, precision):
    sources = read(f"{corpus}/test.en", 8)
    greedy = translator(trained_run, beam_size=1, precision=precision)
    for source, (found,) in zip(greedy.tokenizer.encode_src(sources), greedy(sources)):
        (scored,) = teacher_forced_log_probs(greedy.model, [source], [found.tokens], torch.device("cpu"))
        if precision == "bf16":  # the search's bf16 products differ from one full pass by their rounding:
            # bf16 keeps 8 bits of mantissa, so a long output's sum may differ by that share of itself
            assert sum(scored) == pytest.approx(found.log_prob, rel=2**-8, abs=0.05)
        else:
            assert sum(scored) == pytest.approx(found.log_prob, abs=1e-4)


def test_a_model_ensembled_with_itself_scores_as_alone(trained_run, corpus):
    sources, targets = read(f"{corpus}/test.en", 5), read(f"{corpus}/test.de", 5)
    alone = translator(trained_run)
    pair = translator([trained_run, trained_run])
    assert isinstance(pair.model, Ensemble)
    expected = [s.log_prob for s in score_lines(alone, sources, targets)]
    assert [s.log_prob for s in score_lines(pair, sources, targets)] == pytest.approx(expected, abs=1e-4)


def test_mt_score_prints_total_per_token_and_per_subword_scores(trained_run, corpus, tmp_path):
    sources, targets = read(f"{corpus}/test.en", 4), read(f"{corpus}/test.de", 4)
    (tmp_path / "src").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("\n".join(targets) + "\n", encoding="utf-8")
    common = ["--checkpoint", trained_run, "--src", str(tmp_path / "src"), "--tgt", str(tmp_path / "tgt")]
    result = run_cli("mt-score", *common, "--per-subword")
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    scorer = translator(trained_run)
    expected = score_lines(scorer, sources, targets)
    assert len(rows) == 4
    for row, score, target in zip(rows, expected, scorer.tokenizer.tgt.encode(targets)):
        assert float(row[0]) == pytest.approx(score.log_prob, abs=1e-3)
        assert float(row[1]) == pytest.approx(score.per_token, abs=1e-3)
        assert len(row[2].split()) == len(target) + 1
        assert sum(map(float, row[2].split())) == pytest.approx(score.log_prob, abs=1e-2)
    # with -o the file holds the scores, one line per pair
    written = run_cli("mt-score", *common, "-o", str(tmp_path / "out"))
    assert written.returncode == 0 and written.stdout == ""
    assert [line.split("\t") for line in open(tmp_path / "out", encoding="utf-8").read().splitlines()] == [
        r[:2] for r in rows
    ]


def test_mt_score_refuses_files_of_different_lengths_and_writes_nothing(trained_run, tmp_path):
    (tmp_path / "src").write_text("a\nb\nc\n", encoding="utf-8")
    (tmp_path / "tgt").write_text("a\nb\n", encoding="utf-8")
    out = tmp_path / "out"
    args = ["--checkpoint", trained_run, "--src", str(tmp_path / "src"), "--tgt", str(tmp_path / "tgt")]
    result = run_cli("mt-score", *args, "-o", str(out))
    assert result.returncode == 2
    assert result.stderr.strip() == f"error: --tgt: {tmp_path / 'tgt'} has 2 lines, --src {tmp_path / 'src'} 3"
    assert not out.exists()


def test_pair_costs_are_one_models_cross_entropy_or_two_models_dual_cross_entropy(trained_run, corpus):
    from mt_transformer.data.text import read_lines
    from mt_transformer.decoding.engines import open_translator
    from mt_transformer.decoding.scoring import PairCosts

    sources, targets = read_lines(f"{corpus}/valid.en")[:6], read_lines(f"{corpus}/valid.de")[:6]
    costs = PairCosts(torch.device("cpu"))
    same = open_translator(trained_run, "auto", "cpu", src_lang="en", tgt_lang="de")  # the engine PairCosts opens
    forward = [-score.per_token for score in score_lines(same, sources, targets)]
    backward = [-score.per_token for score in score_lines(same, targets, sources)]
    assert costs.opened([trained_run], "en", "de")(sources, targets) == pytest.approx(forward, rel=1e-4)
    dual = [abs(f - b) + (f + b) / 2 for f, b in zip(forward, backward)]
    both = costs.opened([trained_run, trained_run], "en", "de")
    assert both(sources, targets) == pytest.approx(dual, rel=1e-4) and min(dual) > 0
    assert list(both([" ".join(["word"] * 5000), sources[0]], ["x", targets[0]]))[0] == float("inf")
