import torch

from conftest import FP32_TOLERANCE, tiny_model
from mt_transformer.model.masks import padding_mask
from mt_transformer.model.transformer import count_parameters
from mt_transformer.special_tokens import BOS_ID, EOS_ID, PAD_ID


def tiny(**kwargs):
    torch.manual_seed(0)
    args = dict(d_model=32, n_heads=4, d_ff=64, encoder_layers=2, decoder_layers=2, dropout=0.0)
    args.update(kwargs)
    return tiny_model(40, 40, **args).eval()


def test_three_way_tying_with_a_shared_vocabulary():
    model = tiny()
    assert model.src_embed.weight is model.tgt_embed.weight is model.output.weight
    untied = tiny_model(40, 50, d_model=32, n_heads=4, d_ff=64, encoder_layers=1, decoder_layers=1, share_vocab=False)
    assert untied.src_embed.weight is not untied.tgt_embed.weight
    assert untied.output.weight is untied.tgt_embed.weight  # decoder input/output still tied
    assert count_parameters(model) < count_parameters(tiny(tie_embeddings=False))


def test_source_padding_does_not_change_the_output():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3]])
    padded = torch.tensor([[5, 6, 7, 3, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 9, 10]])
    assert torch.allclose(model(src, tgt), model(padded, tgt), **FP32_TOLERANCE)


def decode_incrementally(model, src, tgt_in, rows=None):
    src_mask = padding_mask(src, PAD_ID)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    steps = []
    for t in range(tgt_in.size(1)):
        states, _ = model.decode(tgt_in[:, t : t + 1], memory, src_mask, cache)
        steps.append(states)
    return torch.cat(steps, dim=1), cache


def test_kv_cache_equals_full_recompute():
    for norm in ("post", "pre"):
        for positions in ("sinusoidal", "learned"):
            model = tiny(norm=norm, positions=positions, max_positions=64)
            src = torch.tensor([[5, 6, 7, 3, 0], [8, 9, 10, 11, 3]])
            tgt_in = torch.tensor([[BOS_ID, 12, 13, 14], [BOS_ID, 15, 16, 17]])
            full = model(src, tgt_in)
            incremental, cache = decode_incrementally(model, src, tgt_in)
            assert torch.allclose(full, incremental, **FP32_TOLERANCE), (norm, positions)
            # kept contiguous: a strided cache would be copied again by every step's matrix products
            assert all(layer.cross_k.is_contiguous() and layer.cross_v.is_contiguous() for layer in cache.layers)


def _step_after_reorder(model, src, tgt_in, order, sentences=None):
    """Decode two positions, reorder the cache rows (and the sentences, if given), decode the third.

    src may hold fewer rows than tgt_in: then each sentence has tgt_in.size(0) // src.size(0)
    consecutive rows (beams) sharing its encoder output, as in beam search."""
    src_mask = padding_mask(src, PAD_ID)
    memory = model.encode(src, src_mask)
    cache = model.new_cache()
    for t in range(2):
        model.decode(tgt_in[:, t : t + 1], memory, src_mask, cache)
    cache.select(order, sentences)
    if sentences is not None:
        memory, src_mask = memory[sentences], src_mask[sentences]
    states, _ = model.decode(tgt_in[order, 2:3], memory, src_mask, cache)
    return states


def test_kv_cache_after_reordering_rows():
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 10, 3], [11, 12, 13, 3]])
    tgt_in = torch.tensor([[BOS_ID, 20, 21], [BOS_ID, 22, 23], [BOS_ID, 24, 25]])
    order = torch.tensor([2, 0, 0])
    reordered = _step_after_reorder(model, src, tgt_in, order, sentences=order)
    assert torch.allclose(reordered, model(src[order], tgt_in[order])[:, 2:3], **FP32_TOLERANCE)


def test_beams_share_one_encoding_of_their_sentence():
    """Two sentences with three beams each: the beams attend to one copy of their sentence's
    encoder output, and the result equals decoding each beam with its own copy."""
    model = tiny()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt_in = torch.tensor(
        [[BOS_ID, 20, 21], [BOS_ID, 22, 23], [BOS_ID, 24, 25], [BOS_ID, 26, 27], [BOS_ID, 28, 29], [BOS_ID, 30, 31]]
    )
    order = torch.tensor([1, 1, 2, 5, 3, 3])  # beams reordered within each sentence
    reordered = _step_after_reorder(model, src, tgt_in, order)
    expected = model(src.repeat_interleave(3, dim=0), tgt_in[order])[:, 2:3]
    assert torch.allclose(reordered, expected, **FP32_TOLERANCE)
    # dropping the first sentence keeps the second one's three beams
    kept = _step_after_reorder(model, src, tgt_in, order[3:], sentences=torch.tensor([1]))
    assert torch.allclose(kept, expected[3:], **FP32_TOLERANCE)


def test_overfits_one_batch():
    from mt_transformer.data.batching import collate
    from mt_transformer.training.loss import label_smoothed_loss

    torch.manual_seed(0)
    model = tiny().train()
    src = [[int(x) for x in torch.randint(4, 40, (n,))] for n in (3, 5, 6, 4)]
    batch = collate(src, [list(reversed(s)) for s in src])
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        loss = (
            label_smoothed_loss(model.logits(model(batch.src, batch.tgt_in)), batch.tgt_out, 0.0) / batch.target_tokens
        )
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05


def test_decoder_attention_weights_are_returned():
    model = tiny()
    src = torch.tensor([[5, 6, 3, 0]])
    src_mask = padding_mask(src, PAD_ID)
    states, weights = model.decode(
        torch.tensor([[BOS_ID, 7]]), model.encode(src, src_mask), src_mask, need_weights=True
    )
    plain, _ = model.decode(torch.tensor([[BOS_ID, 7]]), model.encode(src, src_mask), src_mask)
    assert torch.allclose(states, plain, **FP32_TOLERANCE)
    assert len(weights) == 2 and weights[0].shape == (1, 4, 2, 4)
    assert torch.all(weights[0][..., 3] == 0)


def test_the_feed_forward_activation_is_the_one_configured():
    from mt_transformer.model.layers import FeedForward

    torch.manual_seed(0)
    x = torch.randn(2, 3, 8)
    outputs = {}
    for name, function in (("relu", torch.relu), ("swish", lambda h: h * torch.sigmoid(h)), ("gelu", None)):
        torch.manual_seed(1)
        ffn = FeedForward(8, 16, name)
        h = ffn.linear1(x)
        expected = function(h) if function else 0.5 * h * (1 + torch.erf(h / 2**0.5))  # GELU's exact form
        assert torch.allclose(ffn(x), ffn.linear2(expected), **FP32_TOLERANCE)
        outputs[name] = ffn(x)
    assert not torch.allclose(outputs["relu"], outputs["swish"]) and not torch.allclose(
        outputs["swish"], outputs["gelu"]
    )


def test_fairseq_initialisation_draws_smaller_attention_and_ffn_weights():
    from mt_transformer.model.attention import MultiHeadAttention
    from mt_transformer.model.layers import FeedForward

    torch.manual_seed(0)
    xavier_attention, fairseq_attention = MultiHeadAttention(64, 4), MultiHeadAttention(64, 4, init="fairseq")
    # Xavier-uniform bounds: sqrt(6 / (64 + 128)) = 0.177 for the joint W^K W^V, and
    # sqrt(6 / 128) / sqrt(2) = 0.153 for each 64 x 64 matrix with fairseq's gain
    bound = (6 / 128 / 2) ** 0.5
    assert bound < xavier_attention.kv_proj.weight.abs().max() <= (6 / 192) ** 0.5
    assert 0.9 * bound < fairseq_attention.kv_proj.weight.abs().max() <= bound
    assert fairseq_attention.q_proj.weight.abs().max() <= bound < xavier_attention.q_proj.weight.abs().max()
    xavier_ffn, fairseq_ffn = FeedForward(64, 256), FeedForward(64, 256, init="fairseq")
    assert xavier_ffn.linear2.weight.abs().max() > 256**-0.5 and not xavier_ffn.linear2.bias.any()
    assert fairseq_ffn.linear2.weight.abs().max() <= 256**-0.5 and fairseq_ffn.linear2.bias.any()


def test_word_dropout_blanks_source_words_in_training_only():
    model = tiny(word_dropout=0.5)
    src = torch.tensor([[5, 3]] * 32)  # 32 copies, each with its own mask: a quarter keep both words
    src_mask = padding_mask(src, PAD_ID)
    evaluated = model.encode(src, src_mask)
    assert torch.equal(evaluated, tiny().encode(src, src_mask))  # the same weights; no effect at evaluation
    torch.manual_seed(1)
    trained = model.train().encode(src, src_mask)
    changed = ~torch.isclose(trained, evaluated, **FP32_TOLERANCE).all(-1).all(-1)  # (32,) copies
    assert 0 < changed.sum() < 32  # some copies lost a word, not every one
    # the decoder reads its own words whole: with a given memory, training mode changes nothing
    tgt = torch.tensor([[BOS_ID, 9, 10]])
    memory = evaluated[:1]
    assert torch.equal(model.decode(tgt, memory, src_mask[:1])[0], model.eval().decode(tgt, memory, src_mask[:1])[0])


def test_a_decoder_starting_from_eos_reads_eos_where_the_input_has_bos():
    src, after = torch.tensor([[5, 6, 7, EOS_ID]]), [9, 10]
    fairseq, ours = tiny(decoder_start="eos"), tiny()
    with torch.no_grad():
        fairseq.tgt_embed.weight[BOS_ID].normal_()  # a row the decoder must not read
    states = fairseq(src, torch.tensor([[BOS_ID, *after]]))
    assert torch.equal(states, fairseq(src, torch.tensor([[EOS_ID, *after]])))
    incremental, _ = decode_incrementally(fairseq, src, torch.tensor([[BOS_ID, *after]]))
    assert torch.allclose(states, incremental, **FP32_TOLERANCE)
    assert not torch.allclose(ours(src, torch.tensor([[BOS_ID, *after]])), ours(src, torch.tensor([[EOS_ID, *after]])))


def test_checkpointed_activations_give_the_same_loss_and_gradients_and_keep_fewer_tensors():
    from mt_transformer.data.batching import collate
    from mt_transformer.training.loss import label_smoothed_loss

    src = [[int(x) for x in torch.randint(4, 40, (n,), generator=torch.Generator().manual_seed(n))] for n in (3, 5, 6)]
    batch = collate(src, [list(reversed(s)) for s in src])
    found = []
    for checkpointed in (False, True):
        model = tiny(dropout=0.3, attention_dropout=0.1).train()  # dropout: drawn again alike
        model.checkpoint_activations = checkpointed
        kept = []
        torch.manual_seed(5)
        with torch.autograd.graph.saved_tensors_hooks(lambda t, kept=kept: kept.append(t.numel()) or t, lambda t: t):
            loss = label_smoothed_loss(model.logits(model(batch.src, batch.tgt_in)), batch.tgt_out, 0.1)
        loss.backward()
        found.append((loss.item(), [p.grad.clone() for p in model.parameters()], sum(kept)))
    (loss, grads, kept), (loss_c, grads_c, kept_c) = found
    assert abs(loss - loss_c) < FP32_TOLERANCE["atol"]
    assert all(torch.allclose(a, b, **FP32_TOLERANCE) for a, b in zip(grads, grads_c))
    assert kept_c < kept / 2  # each layer keeps its input alone
