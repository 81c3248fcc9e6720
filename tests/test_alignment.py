import dataclasses
import os

import torch
from PIL import Image

from conftest import FP32_TOLERANCE, run_cli, tiny_model
from mt_transformer.decoding.alignment import (
    attention_heatmap,
    cross_attention,
    first_pieces,
    format_alignment,
    select,
    source_cover,
    word_alignment,
    word_weights,
)
from mt_transformer.model.masks import padding_mask
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def test_words_begin_at_sentencepiece_word_starts():
    assert first_pieces(["▁The", "▁hou", "se", "▁is", "▁red", "."]) == [0, 1, 3, 4]
    assert first_pieces(["ab", "c", "▁d"]) == [0, 2]


def test_alignment_takes_each_target_words_most_attended_source_word():
    src = ["▁das", "▁Haus", "chen", "▁ist"]  # words: das, Hauschen, ist
    tgt = ["▁the", "▁little", "▁house", "▁is"]
    matrix = torch.zeros(len(tgt) + 1, len(src) + 1)  # +1: EOS rows and columns
    matrix[0, 0] = 1.0
    matrix[1, 2] = 0.6  # "little" -> "chen", part of word 1
    matrix[1, 4] = 0.4  # (EOS column: never chosen)
    matrix[2, 1], matrix[2, 2] = 0.5, 0.5  # "house" -> both pieces of word 1
    matrix[3, 3] = 0.9
    matrix[4, 4] = 1.0
    pairs = word_alignment(matrix, src, tgt)
    assert pairs == [(0, 0), (1, 1), (1, 2), (2, 3)]
    assert format_alignment(pairs) == "0-0 1-1 1-2 2-3"


def test_source_cover_gives_each_source_word_no_target_word_took_its_most_attending_target_word():
    src, tgt = ["▁ein", "▁roter", "▁Ball"], ["▁a", "▁red", "▁ball"]
    matrix = torch.zeros(len(tgt) + 1, len(src) + 1)
    matrix[0, 0], matrix[1, 2], matrix[2, 2] = 1.0, 0.6, 0.9  # "red" draws on "Ball", not "roter"
    matrix[1, 1], matrix[2, 1] = 0.4, 0.1
    pairs = word_alignment(matrix, src, tgt)
    assert pairs == [(0, 0), (2, 1), (2, 2)]
    assert source_cover(word_weights(matrix, src, tgt), pairs) == [(1, 1)]


def test_a_word_that_gives_the_eos_most_is_left_unaligned_where_the_model_was_taught_so():
    src, tgt = ["▁ein", "▁Ball"], ["▁a", "▁red", "▁ball"]
    matrix = torch.tensor([[0.9, 0.0, 0.1], [0.1, 0.3, 0.6], [0.0, 0.8, 0.2]])  # last column: EOS
    assert word_alignment(matrix, src, tgt) == [(0, 0), (1, 1), (1, 2)]
    assert word_alignment(matrix, src, tgt, unaligned=True) == [(0, 0), (1, 2)]
    assert word_alignment(matrix[:, :2], src, tgt, unaligned=True) == [(0, 0), (1, 2)]  # CTranslate2: no EOS column


def test_a_step_a_length_limit_left_out_counts_as_the_last_one():
    from types import SimpleNamespace

    from mt_transformer.decoding.alignment import aligned_words

    pieces = {5: "▁ein", 6: "▁Ball", 7: "▁a", 8: "▁ball"}
    tokenizer = SimpleNamespace(
        src_pieces=lambda ids: [pieces[i] for i in ids], tgt_pieces=lambda ids: [pieces[i] for i in ids]
    )
    reading = SimpleNamespace(
        leads=([], []), alignment_step=1, leaves_unaligned=False, tokenizer=tokenizer, attention_of=None
    )
    # the rows that wrote "a" and "ball", no more: the step reading "ball" never ran
    matrix = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    ((pairs, _, _),) = aligned_words(reading, [[5, 6]], [[7, 8]], known=[matrix])
    assert pairs == [(1, 0), (1, 1)]


def test_select_means_heads_or_takes_one():
    weights = torch.arange(2 * 3 * 2 * 2, dtype=torch.float).view(2, 3, 2, 2)  # (layers, heads, tgt, src)
    assert torch.equal(select(weights), weights[-1].mean(0))
    assert torch.equal(select(weights, layer=0, head=2), weights[0, 2])


def test_hypotheses_of_different_lengths_get_the_weights_each_gets_alone():
    torch.manual_seed(0)
    model = tiny_model(20, 20, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    src, hypotheses = [5, 6, 7, 8], [[9, 10, 11, 12, 13, 14], [9], [15, 16, 17]]
    together = cross_attention(model, src, hypotheses, torch.device("cpu"))
    for ids, weights in zip(hypotheses, together):
        alone = cross_attention(model, src, [ids], torch.device("cpu"))[0]
        assert weights.shape == alone.shape == (2, 2, len(ids) + 1, len(src) + 1)
        torch.testing.assert_close(weights, alone, **FP32_TOLERANCE)
        torch.testing.assert_close(weights.sum(-1), torch.ones(2, 2, len(ids) + 1))


def test_a_legacy_layout_sources_weights_come_in_the_order_of_its_ids():
    torch.manual_seed(0)
    model = tiny_model(20, 20, d_model=16, n_heads=2, d_ff=32, encoder_layers=2, decoder_layers=2, dropout=0.0)
    tag, text, output = 19, [5, 6, 7], [9, 10, 11]
    (legacy,) = cross_attention(model, [tag, *text], [output], torch.device("cpu"), tag_after_eos=True)
    src = torch.tensor([[*text, EOS_ID, tag]])  # (1, 5): what the encoder reads
    mask = padding_mask(src, PAD_ID)
    with torch.no_grad():
        _, weights = model.decode(torch.tensor([[BOS_ID, *output]]), model.encode(src, mask), mask, need_weights=True)
    read = torch.stack(weights, 1)[0]  # (layers, heads, 4, 5), columns in the order read
    torch.testing.assert_close(legacy[..., 0], read[..., 4], **FP32_TOLERANCE)  # the tag's column first
    torch.testing.assert_close(legacy[..., 1:], read[..., :4], **FP32_TOLERANCE)  # then text and EOS


def test_translate_alignment_has_one_pair_per_target_word_and_heatmaps_are_written(trained_run, tmp_path):
    lines = ["I bought a red apple yesterday.", "", "Tom will sell 5 old cups tomorrow."]
    heatmaps = tmp_path / "attention"
    result = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "--alignment",
        "--attention",
        str(heatmaps),
        input="\n".join(lines) + "\n",
    )
    assert result.returncode == 0, result.stderr
    rows = [line.split("\t") for line in result.stdout.split("\n")[:-1]]
    assert len(rows) == 3 and rows[1] == ["", ""]
    for (text, alignment), line in zip([rows[0], rows[2]], [lines[0], lines[2]]):
        pairs = [tuple(map(int, pair.split("-"))) for pair in alignment.split()]
        assert [t for _, t in pairs] == list(range(len(text.split())))  # one per target word, in order
        assert all(0 <= s < len(line.split()) for s, _ in pairs)
    assert sorted(os.listdir(heatmaps)) == ["0000.png", "0002.png"]
    with Image.open(heatmaps / "0000.png") as image:
        assert image.format == "PNG" and image.size[0] >= 600 and image.size[1] >= 400
    one_head = run_cli(
        "mt-translate",
        "--checkpoint",
        trained_run,
        "--attention",
        str(tmp_path / "one"),
        "--attention-layer",
        "1",
        "--attention-head",
        "2",
        input=lines[0] + "\n",
    )
    assert one_head.returncode == 0, one_head.stderr
    assert "\t" not in one_head.stdout  # heatmaps only: the output lines stay plain translations
    assert os.listdir(tmp_path / "one") == ["0000.png"]
    bad = run_cli(
        "mt-translate", "--checkpoint", trained_run, "--alignment", "--attention-head", "9", input=lines[0] + "\n"
    )
    assert bad.returncode == 2 and "--attention-head: 9 is not between 1 and 4" in bad.stderr


def test_heatmap_grows_with_the_sentence_and_stays_readable(tmp_path):
    short, long = tmp_path / "short.png", tmp_path / "long.png"
    attention_heatmap(torch.full((4, 3), 1 / 3), ["▁a", "▁b"], ["▁x", "▁y", "z"], str(short), "short")
    attention_heatmap(
        torch.full((21, 31), 1 / 31), [f"▁s{i}" for i in range(30)], [f"▁t{i}" for i in range(20)], str(long), "long"
    )
    (w1, h1), (w2, h2) = (Image.open(path).size for path in (short, long))
    assert w2 > w1 and h2 > h1
    assert 500 <= w1 and 300 <= h1 and w2 <= 4000 and h2 <= 4000


def _reading(translator):
    """The translator as if train.guided_alignment had taught the steps that read each piece."""
    config = translator.config
    guided = dataclasses.replace(config.train.guided_alignment, weight=0.1, step="reads")
    train = dataclasses.replace(config.train, guided_alignment=guided)
    return dataclasses.replace(translator, config=dataclasses.replace(config, train=train)).with_attention()


def test_both_engines_align_each_piece_by_the_step_that_reads_it_where_that_one_was_taught(trained_run, corpus):
    from mt_transformer.decoding.alignment import aligned_words
    from mt_transformer.decoding.engines import open_translator

    with open(f"{corpus}/test.en", encoding="utf-8") as f:
        lines = [line.strip() for line in f][:12]
    forced = _reading(open_translator(trained_run, "torch", "cpu"))  # teacher-forced weights
    for engine in ("torch", "ctranslate2"):
        for beam in (1, 3):  # a beam search: CTranslate2's first row unread, so not searched again
            translator = _reading(open_translator(trained_run, engine, "cpu", beam_size=beam))
            best = [r[0] for r in translator(lines)]
            sources, outputs = translator.source_ids(lines), [t.tokens for t in best]
            found = aligned_words(translator, sources, outputs, None, [t.attention for t in best])
            for ids, t, (pairs, _, matrix) in zip(sources, best, found):
                (weights,) = forced.cross_attention(ids, [t.tokens])  # (target + 1, source + 1)
                if engine == "ctranslate2":  # a row per piece, then the one that wrote EOS (none at the limit)
                    assert len(matrix) - len(t.tokens) in (0, 1)
                    rows = weights[1 : len(matrix), : matrix.shape[1]]  # (a beam search's first: unread, unfixed)
                    torch.testing.assert_close(matrix[1:], rows, atol=2e-3, rtol=0)
                src, tgt = translator.tokenizer.src_pieces(ids), translator.tokenizer.tgt_pieces(t.tokens)
                assert pairs == word_alignment(matrix[1:], src, tgt)  # row t + 1 for piece t
