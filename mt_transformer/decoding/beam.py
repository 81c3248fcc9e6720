"""Batched beam search with the GNMT length penalty and the decoder's key/value cache.

Decoder rows are flat (sentence * width); the encoder output and the cross-attention keys and
values are kept once per sentence. Step 0 decodes one row per sentence (every beam would start
from BOS alike) and its best candidates become the sentence's `beam` rows. Each step takes the
top 2*beam candidates over (width, vocab): an EOS among the first `beam` ends a
hypothesis, and the best `beam` others continue. A sentence is done once it has `beam`
finished hypotheses (fairseq's rule) or reaches its length limit, where EOS is forced; done
sentences leave the batch so later steps run on fewer rows.

With lexical constraints (decoding/constraints.py) the same loop restricts each step's
log-probabilities and chooses the continuing rows by dynamic beam allocation; hypotheses that
end holding every phrase to include rank before those that do not.
"""

from __future__ import annotations

import torch

from mt_transformer.decoding import stopping
from mt_transformer.decoding.lexical_beam import LexicalBeam
from mt_transformer.decoding.next_token import next_token_log_probs
from mt_transformer.decoding.search import Hypothesis, length_penalty


@torch.inference_mode()
def beam_search(
    model,
    src: torch.Tensor,
    src_mask: torch.Tensor,
    max_len: torch.Tensor,
    bos_id: int,
    eos_id: int,
    *,
    beam_size: int,
    alpha: float,
    n_best: int,
    no_repeat_ngram: int = 0,
    prefix: torch.Tensor | None = None,
    lexical: LexicalBeam | None = None,
) -> list[list[Hypothesis]]:
    """Return the n_best hypotheses of each sentence, best first; with `no_repeat_ngram` N > 0 no
    hypothesis holds an n-gram of N tokens twice; `prefix` (batch, prefix_len), -1 past each
    row's end, forces the first tokens; `lexical` holds each sentence's constraints, met by
    dynamic beam allocation (each hypothesis's `unmet` counts the phrases to include it lacks).

    src: (batch, src_len); src_mask: (batch, 1, 1, src_len); max_len: (batch,) output-length limits.
    """
    batch, device, beam = src.size(0), src.device, beam_size
    # one encoding per sentence: its `beam` rows share it (the cross-attention folds them together)
    memory = model.encode(src, src_mask)  # (batch, src_len, d_model)
    cache, project = model.new_cache(), model.logits
    sentence = torch.arange(batch, device=device)  # original index of each live sentence
    max_len = max_len.to(device)
    tokens = torch.full((batch, 1), bos_id, dtype=torch.long, device=device)  # (live*width, step+1)
    scores = torch.zeros(batch, 1, device=device)  # (live, width): cumulative log-probs
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    # the same on the host, where the step's bookkeeping reads them: no device syncs for it
    owners, limits = list(range(batch)), max_len.tolist()
    shortest_limit = min(limits)

    for step in range(max(limits) + 1):
        stopping.check()  # a caller that gave up on this translation (decoding/stopping.py)
        live = len(owners)
        width = scores.size(1)  # rows per sentence: 1 at step 0, then beam
        states, _ = model.decode(tokens[:, -1:], memory, src_mask, cache)
        memory = None  # from now on the cache holds the cross-attention keys and values
        # a host-side check spares the full-vocabulary masking before any row's limit
        at_limit = (max_len <= step).repeat_interleave(width) if step >= shortest_limit else None
        row_prefix = None if prefix is None else prefix[sentence].repeat_interleave(width, dim=0)
        log_probs = next_token_log_probs(project, states, step, eos_id, tokens, no_repeat_ngram, at_limit, row_prefix)
        if lexical is not None:
            lexical.restrict(log_probs, at_limit)
        top = _best_candidates(log_probs, scores, beam)  # each (live, 2*beam)
        if lexical is None:
            ends, (scores, next_beam, next_token) = _choose(top, beam, eos_id)
        else:
            ends, (scores, next_beam, next_token) = lexical.choose(log_probs, scores, top, beam)
        _finish_hypotheses(finished, owners, tokens, ends, beam, width, step, alpha, lexical)
        rows = (torch.arange(live, device=device) * width)[:, None] + next_beam  # (live, beam)
        width = scores.size(1)
        tokens = torch.cat([tokens[rows.view(-1)], next_token.view(-1, 1)], dim=1)

        done = [len(finished[s]) >= beam or limit <= step for s, limit in zip(owners, limits)]
        if all(done):
            break
        keep = None
        if any(done):  # finished sentences leave the batch
            kept = [i for i, d in enumerate(done) if not d]
            owners, limits = [owners[i] for i in kept], [limits[i] for i in kept]
            keep = torch.tensor(kept, device=device)  # (still_live,)
            rows, sentence, max_len, scores, src_mask = (t[keep] for t in (rows, sentence, max_len, scores, src_mask))
            tokens = tokens.view(-1, width, tokens.size(1))[keep].flatten(0, 1)  # (still_live*width, step+2)
            shortest_limit = min(limits)
            if lexical is not None:
                lexical.keep(kept)
        cache.select(rows.view(-1), sentences=keep)

    return [sorted(hyps, key=lambda h: (h.unmet == 0, h.score), reverse=True)[:n_best] for hyps in finished]


def _best_candidates(
    log_probs: torch.Tensor, scores: torch.Tensor, beam: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best 2*beam continuations of each sentence over (its rows, vocab): their cumulative
    log-probs, the row of the sentence each extends, and its token, each (live, 2*beam).

    log_probs: (live*width, vocab) of the next token; scores: (live, width) cumulative log-probs.
    """
    live = scores.size(0)
    # a candidate among the best 2*beam of a sentence is among the best 2*beam of its own row,
    # so only those are scored: no (live, beam * vocab) sums
    per_row = min(2 * beam, log_probs.size(-1))
    row_log_probs, row_tokens = log_probs.topk(per_row, dim=-1)  # (live*width, per_row)
    row_scores = (scores.view(-1, 1) + row_log_probs).view(live, -1)  # (live, width*per_row)
    top_scores, top_index = row_scores.topk(min(2 * beam, row_scores.size(1)), dim=1)
    return top_scores, top_index // per_row, row_tokens.view(live, -1).gather(1, top_index)


def _choose(
    top: tuple[torch.Tensor, torch.Tensor, torch.Tensor], beam: int, eos_id: int
) -> tuple[list[tuple[int, int, float]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The hypotheses that end now, as (sentence, row within it, cumulative log-prob), and the
    `beam` of each sentence that continue, as (cumulative log-probs, row within the sentence,
    token), each (live, beam), best first: an EOS among the best `beam` candidates ends its
    hypothesis, and the best `beam` candidates that are not EOS continue.

    top: the best 2*beam candidates of each sentence (scores, row within the sentence, token).
    """
    top_scores, top_beam, top_token = top
    is_eos = top_token == eos_id
    ending = (is_eos[:, :beam] & (top_scores[:, :beam] > float("-inf"))).nonzero().tolist()  # one host sync
    ends = [(i, int(top_beam[i, j]), float(top_scores[i, j])) for i, j in ending]
    scores, order = top_scores.masked_fill(is_eos, float("-inf")).topk(min(beam, top_scores.size(1)), dim=1)
    return ends, (scores, top_beam.gather(1, order), top_token.gather(1, order))


def _finish_hypotheses(finished, owners, tokens, ends, beam: int, width: int, step: int, alpha: float, lexical):
    """Record the hypotheses that end at this step, until each sentence has `beam` of them.

    tokens: (live*width, step+1); ends: (live sentence, row within it, cumulative log-prob);
    lexical: None, or the LexicalBeam whose constraints count the phrases a hypothesis lacks.
    """
    for i, w, log_prob in ends:
        owner = owners[i]
        if len(finished[owner]) < beam:
            found = tokens[i * width + w, 1:].tolist()
            unmet = lexical.constraints[i].unmet(found) if lexical is not None else 0
            finished[owner].append(Hypothesis(found, log_prob / length_penalty(step + 1, alpha), log_prob, unmet))
