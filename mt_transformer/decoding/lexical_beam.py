"""The beam search's side of lexical constraints (constraints.py): it meets them by dynamic beam
allocation (Post & Vilar, 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation
for Neural Machine Translation", section 3):

- candidates: the best 2*beam continuations over the sentence's rows, plus for every row the
  tokens that advance one of its unmet phrases, plus every row's own best token;
- banks: a candidate's bank is the number of constraint subwords its hypothesis has produced,
  0..C for C constraint subwords in all. The beam's slots are split evenly over the C + 1 banks,
  and each bank keeps its best candidates by score, so hypotheses that met more constraints
  never push out all the good ones that met fewer (and the reverse). Slots a bank cannot fill go
  to the other banks, those with more progress first;
- ends: EOS is possible only for a hypothesis that holds every phrase (or at its length limit);
  EOS candidates take part in the allocation in their hypotheses' banks, and those it chooses end.

A token that would complete a phrase to avoid is never chosen.
"""

from __future__ import annotations

import torch

from mt_transformer.decoding.constraints import Constraints, PieceIndex, Progress


def allocate(banks: list[int], beam: int, top_bank: int) -> list[int]:
    """Which candidates continue: `banks[j]` is candidate j's bank (candidates best first). Each
    of the banks 0..top_bank gets beam // (top_bank + 1) slots, the remainder going to the highest
    banks; slots a bank cannot fill pass to the banks with the most progress that have
    candidates left. Returns up to `beam` candidate indices, best first."""
    count = top_bank + 1
    slots = [beam // count + (b >= count - beam % count) for b in range(count)]
    by_bank: list[list[int]] = [[] for _ in range(count)]
    for j, bank in enumerate(banks):
        by_bank[bank].append(j)
    chosen = [j for b in range(count) for j in by_bank[b][: slots[b]]]
    spare = beam - len(chosen)
    for b in reversed(range(count)):
        extra = by_bank[b][slots[b] : slots[b] + spare]
        chosen += extra
        spare -= len(extra)
    return sorted(chosen)


class LexicalBeam:
    """The constraint progress of every row of a beam search over sentences that all have
    constraints, the masks that enforce them, and the choice of each step's rows."""

    def __init__(self, constraints: list[Constraints], eos_id: int, index: PieceIndex):
        self.constraints, self.eos_id, self.index = list(constraints), eos_id, index
        self.progress: list[list[Progress]] = [[Progress()] for _ in constraints]  # per sentence, per row

    def restrict(self, log_probs: torch.Tensor, at_limit: torch.Tensor | None) -> None:
        """In log_probs (live*width, vocab): no token completes a phrase to avoid, and no row
        ends before it holds every phrase to include unless it is at its length limit."""
        width = len(self.progress[0])
        limited = at_limit.tolist() if at_limit is not None else None
        rows, tokens = [], []
        for s, (c, states) in enumerate(zip(self.constraints, self.progress)):
            for w, state in enumerate(states):
                row = s * width + w
                banned = state.banned(c, self.index)
                if not state.complete(c) and not (limited and limited[row]):
                    banned.append(self.eos_id)
                rows += [row] * len(banned)
                tokens += banned
        if rows:
            log_probs[rows, tokens] = float("-inf")

    def choose(
        self,
        log_probs: torch.Tensor,
        scores: torch.Tensor,
        top: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        beam: int,
    ) -> tuple[list[tuple[int, int, float]], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
        """The hypotheses that end now, as (sentence, row within it, cumulative log-prob), and
        the `beam` of each sentence that continue, chosen by dynamic beam allocation, as
        (cumulative log-probs, row within the sentence, token), each (live, beam), best first;
        the rows' progress follows them. A hypothesis ends where the allocation over every
        candidate, EOS included, chooses its EOS (EOS is possible only for hypotheses that hold
        every phrase to include, or at the length limit); the continuing rows are allocated
        among the other candidates, so ends never shrink the beam.

        log_probs: (live*width, vocab), restricted; scores: (live, width) cumulative log-probs so far;
        top: the best 2*beam candidates of each sentence (scores, row within the sentence, token).
        """
        candidates = self._candidates(log_probs, scores, top)
        eos = (scores.view(-1) + log_probs[:, self.eos_id]).view(scores.shape).tolist()  # (live, width)
        ends, chosen_scores, chosen_rows, chosen_tokens = [], [], [], []
        for s, (c, states) in enumerate(zip(self.constraints, self.progress)):
            found = sorted(
                ((score, w, token) for (w, token), score in candidates[s].items() if score > float("-inf")),
                key=lambda x: -x[0],
            )
            advanced = [states[w].advance(token, self.index.piece(token), c) for _, w, token in found]
            # EOS candidates take part in the allocation, in their hypotheses' banks: those chosen end
            ending = [(score, w) for w, score in enumerate(eos[s]) if score > float("-inf")]
            every = sorted(
                [(score, states[w].bank(c), w) for score, w in ending]
                + [(f[0], p.bank(c), None) for f, p in zip(found, advanced)],
                key=lambda x: -x[0],
            )
            for j in allocate([bank for _, bank, _ in every], beam, c.subwords):
                if every[j][2] is not None:
                    ends.append((s, every[j][2], every[j][0]))
            picked = allocate([p.bank(c) for p in advanced], beam, c.subwords)
            # too few candidates (a vocabulary of almost only banned tokens): the rest are dead rows
            dead = beam - len(picked)
            self.progress[s] = [advanced[j] for j in picked] + [states[0]] * dead
            chosen_scores.append([found[j][0] for j in picked] + [float("-inf")] * dead)
            chosen_rows.append([found[j][1] for j in picked] + [0] * dead)
            chosen_tokens.append([found[j][2] for j in picked] + [self.eos_id] * dead)
        device = scores.device
        chosen = (
            torch.tensor(chosen_scores, device=device),
            torch.tensor(chosen_rows, device=device),
            torch.tensor(chosen_tokens, device=device),
        )
        return ends, chosen

    def _candidates(self, log_probs, scores, top) -> list[dict[tuple[int, int], float]]:
        """Per sentence, {(row within it, token): cumulative log-prob} of the non-EOS candidates:
        its best 2*beam, every row's best token and every row's tokens that advance a phrase."""
        live, width = scores.shape
        rows, tokens = [], []  # every row's advancing tokens, scored in one gather
        for s, (c, states) in enumerate(zip(self.constraints, self.progress)):
            for w, state in enumerate(states):
                wanted = state.wanted(c)
                rows += [s * width + w] * len(wanted)
                tokens += wanted
        gathered = log_probs[rows, tokens].tolist() if rows else []
        best_scores, best_tokens = (t.tolist() for t in log_probs.max(dim=-1))
        previous = scores.tolist()
        top_scores, top_rows, top_tokens = (t.tolist() for t in top)
        candidates: list[dict[tuple[int, int], float]] = [{} for _ in range(live)]
        for s in range(live):
            for score, w, token in zip(top_scores[s], top_rows[s], top_tokens[s]):
                candidates[s][(w, token)] = score
            for w in range(width):
                candidates[s][(w, best_tokens[s * width + w])] = previous[s][w] + best_scores[s * width + w]
        for row, token, log_prob in zip(rows, tokens, gathered):
            candidates[row // width][(row % width, token)] = previous[row // width][row % width] + log_prob
        for found in candidates:
            for key in [k for k in found if k[1] == self.eos_id]:
                del found[key]
        return candidates

    def keep(self, sentences: list[int]) -> None:
        """Only these (live indices) go on."""
        self.constraints = [self.constraints[s] for s in sentences]
        self.progress = [self.progress[s] for s in sentences]
