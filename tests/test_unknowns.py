"""Unknown subwords in translations: never printed as "⁇", filled from the source by attention or left out."""

import torch

from conftest import run_cli, translator
from mt_transformer.decoding import unknowns
from mt_transformer.decoding.search import Hypothesis
from mt_transformer.special_tokens import UNK_ID


def test_each_target_unknown_takes_the_source_span_it_attends_to_most(trained_run, monkeypatch):
    translate = translator(trained_run)
    tokenizer = translate.tokenizer
    text = "Tom 😀 sold 中 it"
    src_ids = tokenizer.encode_src([text])[0]
    spans = tokenizer.src_unknowns(text)
    assert [s for _, s in spans] == ["😀", "中"]
    output = tokenizer.tgt.encode("Tom") + [UNK_ID] + tokenizer.tgt.encode("und") + [UNK_ID]
    holes = [t for t, token in enumerate(output) if token == UNK_ID]

    def attention(src, outputs):  # the first hole looks at 中, the second at 😀
        weights = torch.zeros(len(output) + 1, len(src) + 1)
        weights[holes[0], spans[1][0]] = 1.0
        weights[holes[1], spans[0][0]] = 1.0
        return [weights for _ in outputs]

    fills = unknowns.unknown_fills(attention, tokenizer, text, src_ids, [output, []])
    assert fills == [["中", "😀"], []]
    # without attention (inputs translated in parts): in order
    assert unknowns.unknown_fills(attention, tokenizer, text, None, [output]) == [["😀", "中"]]
    assert unknowns.unknown_fills(None, tokenizer, "Tom sold it", None, [output]) == [[]]


def test_translations_never_print_the_unknown_mark_and_count_their_unknowns(trained_run, monkeypatch, tmp_path):
    translate = translator(trained_run)
    tokenizer = translate.tokenizer
    written = tokenizer.tgt.encode("Tom 😀")  # a model that writes <unk> after "Tom"
    assert written[-1] == UNK_ID

    def search(sources, prefixes=None, constraints=None):
        return [[Hypothesis(written, -1.0, -1.0)] for _ in sources]

    monkeypatch.setattr(translate, "search", search)
    copied, dropped = translate(["Tom 😀 sold it", "Tom sold it"])
    assert (copied[0].text, copied[0].unknowns) == ("Tom 😀", 1)
    assert (dropped[0].text, dropped[0].unknowns) == ("Tom", 1)

    result = run_cli("mt-translate", "--checkpoint", trained_run, "--scores", input="Tom 😀 sold it\n")
    assert result.returncode == 0, result.stderr
    assert "⁇" not in result.stdout and result.stdout.count("\t") == 3
