"""Lexical constraints: target phrases a translation must contain (in any order) and phrases it
must not contain, each a contiguous run of subwords, and each hypothesis's way through them.
The beam search that meets them is in lexical_beam.py.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

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


def encode_constraints(
    tokenizer, decode, include: list[list[str]], avoid: list[list[str]], first_line: int = 0
) -> list[Constraints] | None:
    """Each line's constraints, or None when no line has any: phrases to include as target
    subwords (one with characters the target vocabulary cannot spell is a one-line error naming
    its line, counted from first_line + 1), phrases to avoid as text. The decode settings must
    search a beam for them (one-line errors)."""
    from mt_transformer.data.text import normalize
    from mt_transformer.special_tokens import UNK_ID

    def encode(phrases: list[str], line: int) -> tuple[tuple[int, ...], ...]:
        texts = [normalize(p) for p in phrases if normalize(p)]
        encoded = tokenizer.tgt.encode(texts) if texts else []
        for text, ids in zip(texts, encoded):
            if UNK_ID in ids:
                raise UserError(f"--constraints: line {line}: {text!r} has characters the target vocabulary lacks")
        return tuple(tuple(ids) for ids in encoded)

    def spell(phrases: list[str]) -> tuple[str, ...]:  # "red apple" -> "▁red▁apple"
        return tuple(WORD_START + WORD_START.join(normalize(p).split()) for p in phrases if normalize(p))

    lines = enumerate(zip(include, avoid), start=first_line + 1)
    lexical = [Constraints(encode(i, n), spell(a)) for n, (i, a) in lines]
    if not any(lexical):
        return None
    if decode.sampling:
        raise UserError("--constraints and --avoid: for beam search, not with --sampling")
    if decode.beam_size == 1 and any(c.include for c in lexical):
        raise UserError("--constraints: needs beam search (--beam 2 or more); greedy search cannot plan for them")
    return lexical


def split_constraints(c: Constraints, capacities: list[int], line: int = 0) -> list[Constraints]:
    """One input's constraints over the parts it is translated in (`capacities`: the most
    subwords each part's translation may have): each phrase to include goes to the first part
    that still has room for it, and the phrases to avoid go to every part. Phrases that more than
    the translation may hold are a one-line error naming `line` (0-based)."""
    if c.subwords > sum(capacities):
        raise UserError(
            f"--constraints: line {line + 1}: its phrases take {c.subwords} subwords, more than the "
            f"{sum(capacities)} its translation may have (decode.max_len_a, decode.max_len_b)"
        )
    room, parts = list(capacities), [[] for _ in capacities]
    for phrase in c.include:
        part = next((k for k, free in enumerate(room) if free >= len(phrase)), len(room) - 1)
        parts[part].append(phrase)
        room[part] -= len(phrase)
    return [Constraints(tuple(p), c.avoid) for p in parts]
