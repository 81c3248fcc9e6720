"""Lexical constraints: target phrases a translation must contain (in any order) and phrases it
must not contain, each a contiguous run of subwords.

The beam search meets them by dynamic beam allocation (Post & Vilar, 2018, "Fast Lexically
Constrained Decoding with Dynamic Beam Allocation for Neural Machine Translation", section 3):

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

import bisect
from dataclasses import dataclass

import torch

from mt_transformer.data.tokenizer import WORD_START
from mt_transformer.errors import UserError


@dataclass(frozen=True)
class Constraints:
    """One input's constraints: phrases to include as target subword ids, phrases to avoid as
    text in sentencepiece's spelling ("▁red▁apple"). A phrase to avoid is matched in the text of
    the output, however it is split into subwords, wherever a word starts with it: avoiding "dog"
    also avoids "dogs", not "hotdog"."""

    include: tuple[tuple[int, ...], ...] = ()  # each must appear
    avoid: tuple[str, ...] = ()  # none may appear

    def __bool__(self) -> bool:
        return bool(self.include or self.avoid)

    @property
    def subwords(self) -> int:
        """C: the subwords of all the phrases to include."""
        return sum(map(len, self.include))

    def unmet(self, tokens: list[int]) -> int:
        """How many phrases to include `tokens` lacks."""
        return sum(not _contains(tokens, phrase) for phrase in self.include)

    def met_by(self, tokens: list[int], pieces: list[str]) -> bool:
        """Whether the output `tokens` (`pieces`: their text) holds every phrase to include and none to avoid."""
        text = WORD_START + "".join(pieces)  # the text begins a word, whether its first piece says so or not
        return self.unmet(tokens) == 0 and not any(phrase in text for phrase in self.avoid)


def _contains(tokens: list[int], phrase: tuple[int, ...]) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == phrase for i in range(len(tokens) - n + 1))


class PieceIndex:
    """The target vocabulary's pieces as text, to find the tokens that would complete a phrase
    to avoid. Control pieces, <unk> and byte pieces spell no text and are left out."""

    def __init__(self, processor):
        spelled = [
            (processor.id_to_piece(i), i)
            for i in range(processor.get_piece_size())
            if not (processor.is_control(i) or processor.is_unknown(i) or processor.is_byte(i))
        ]
        self.pieces = {i: piece for piece, i in spelled}
        self.sorted = sorted(spelled)
        self.keys = [piece for piece, _ in self.sorted]
        self._banned: dict[str, list[tuple[str, list[int]]]] = {}

    def piece(self, token: int) -> str:
        return self.pieces.get(token, "")

    def starting_with(self, text: str) -> list[int]:
        first = bisect.bisect_left(self.keys, text)
        last = bisect.bisect_left(self.keys, text + "\U0010ffff")
        return [i for _, i in self.sorted[first:last]]

    def completions(self, phrase: str) -> list[tuple[str, list[int]]]:
        """(text before, tokens): after text ending in `text before`, these tokens complete `phrase`."""
        if phrase not in self._banned:
            inside = [i for piece, i in self.sorted if phrase in piece[1:]]
            ways = [("", self.starting_with(phrase) + inside)]
            ways += [(phrase[:k], self.starting_with(phrase[k:])) for k in range(1, len(phrase))]
            self._banned[phrase] = [(before, tokens) for before, tokens in ways if tokens]
        return self._banned[phrase]


@dataclass(frozen=True)
class Progress:
    """A hypothesis's way through its constraints."""

    met: frozenset[int] = frozenset()  # the phrases to include that it has produced
    partial: tuple[int, int] | None = None  # (phrase, subwords of it produced) of a phrase under way
    # the end of its text, as long as the longest phrase to avoid less one; the text begins a word
    recent: str = WORD_START

    def bank(self, c: Constraints) -> int:
        """Constraint subwords produced: those of met phrases and of the one under way."""
        return sum(len(c.include[p]) for p in self.met) + (self.partial[1] if self.partial else 0)

    def complete(self, c: Constraints) -> bool:
        return len(self.met) == len(c.include)

    def wanted(self, c: Constraints) -> list[int]:
        """The tokens that advance: the next subword of the phrase under way, else the first of every unmet one."""
        if self.partial:
            phrase, done = self.partial
            return [c.include[phrase][done]]
        return list({c.include[p][0] for p in range(len(c.include)) if p not in self.met})

    def banned(self, c: Constraints, index: PieceIndex) -> list[int]:
        """The tokens that would complete a phrase to avoid."""
        return [
            token
            for phrase in c.avoid
            for before, tokens in index.completions(phrase)
            if self.recent.endswith(before)
            for token in tokens
        ]

    def advance(self, token: int, piece: str, c: Constraints) -> Progress:
        """The progress after `token`, whose text is `piece`."""
        keep = max(map(len, c.avoid), default=1) - 1
        recent = (self.recent + piece)[-keep:] if keep else ""
        met, partial = self.met, self.partial
        if partial:
            phrase, done = partial
            if c.include[phrase][done] == token:
                done += 1
                if done == len(c.include[phrase]):
                    return Progress(met | {phrase}, None, recent)
                return Progress(met, (phrase, done), recent)
            partial = None  # broken off: its subwords so far count no more; the token may start another
        for p, phrase in enumerate(c.include):
            if p not in met and phrase[0] == token:
                if len(phrase) == 1:
                    return Progress(met | {p}, None, recent)
                return Progress(met, (p, 1), recent)
        return Progress(met, partial, recent)


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


def encode_constraints(
    tokenizer, include: list[list[str]], avoid: list[list[str]], first_line: int = 0
) -> list[Constraints]:
    """Each line's constraints: phrases to include as target subwords (one with characters the
    target vocabulary cannot spell is a one-line error naming its line, counted from first_line
    + 1), phrases to avoid as text."""
    from mt_transformer.data.special_tokens import UNK_ID
    from mt_transformer.data.text import normalize

    def encode(phrases: list[str], line: int) -> tuple[tuple[int, ...], ...]:
        texts = [normalize(p) for p in phrases if normalize(p)]
        encoded = tokenizer.tgt.encode(texts) if texts else []
        for text, ids in zip(texts, encoded):
            if UNK_ID in ids:
                raise UserError(f"--constraints: line {line}: {text!r} has characters the target vocabulary lacks")
        return tuple(tuple(ids) for ids in encoded)

    def spell(phrases: list[str]) -> tuple[str, ...]:  # "red apple" -> "▁red▁apple"
        return tuple(WORD_START + WORD_START.join(normalize(p).split()) for p in phrases if normalize(p))

    return [Constraints(encode(i, n), spell(a)) for n, (i, a) in enumerate(zip(include, avoid), start=first_line + 1)]


def split_constraints(c: Constraints, capacities: list[int]) -> list[Constraints]:
    """One input's constraints over the parts it is translated in (`capacities`: the most
    subwords each part's translation may have): each phrase to include goes to the first part
    that still has room for it, and the phrases to avoid go to every part."""
    room, parts = list(capacities), [[] for _ in capacities]
    for phrase in c.include:
        part = next((k for k, free in enumerate(room) if free >= len(phrase)), len(room) - 1)
        parts[part].append(phrase)
        room[part] -= len(phrase)
    return [Constraints(tuple(p), c.avoid) for p in parts]
