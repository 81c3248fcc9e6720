"""Inline elements carried from a source sentence onto its translation through word alignments.

Each element of the source covers a range of its words (or none: an empty or void element sits
between two words). On the translation it covers the target words aligned to the words it
covered (or, where none of its words has one, the target words that attend to them most), spread
to one unbroken range: the first to the last of them, or where they lie apart the part that holds
the most of them. Two of its words stay in one range across one word between them, or across
more where none of those is aligned to a source word outside the element (as phrase extraction
keeps a phrase pair consistent). Ranges are then made to nest as the source's elements do (a child
inside its parent, siblings apart), so the output is well-formed with exactly the source's
elements; an element left with no words sits where the target word of the source word after it
(or before it) is.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

TRAILING = re.compile(r"(.*?\w.*?)([^\w\s]+)")  # a word and the punctuation it ends with


@dataclass(frozen=True)
class Span:
    """An inline element of a sentence: its tags as written, the words it covers, first to one past
    the last (first == stop: none; it sits before word `first`), and the element it is inside
    (an index into the sentence's spans, which list parents before their children) or None."""

    start_tag: str  # verbatim
    end_tag: str  # verbatim ("" for a void element)
    first: int
    stop: int
    parent: int | None = None
    gap: str = ""  # with no words: what comes between it and the word after it
    tail: bool = False  # the punctuation its last word ends with is outside it ("<b>word</b>.")


def project(
    spans: list[Span],
    alignment: list[tuple[int, int]],
    source_words: int,
    target_words: int,
    cover: list[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
    """Per span, the (first, stop) range of target words it covers. `alignment`: (source word,
    target word) pairs, 0-based; `cover`: pairs for source words `alignment` gives no target word
    (decoding/alignment.py's source_cover), taken by an element none of whose words has another.
    Each span costs the size of its words' alignments and a bisection among its siblings' ranges."""
    targets, fallback = _by_source(alignment, target_words), _by_source(cover, target_words)
    anchors = _Anchors({**targets, **fallback}, source_words, target_words)  # disjoint: see `cover`
    sources: dict[int, list[int]] = {}  # the source words aligned to each target word
    for s, linked in targets.items():
        for t in linked:
            sources.setdefault(t, []).append(s)
    placed: list[tuple[int, int]] = []
    siblings: dict[int | None, _Ranges] = {}  # the non-empty ranges placed so far, per parent
    for span in spans:
        lo, hi = (0, target_words) if span.parent is None else placed[span.parent]
        taken = siblings.setdefault(span.parent, _Ranges())
        words = range(span.first, span.stop)
        covered = _within(targets, words, lo, hi) or _within(fallback, words, lo, hi)

        def elsewhere(t: int, words=words) -> bool:  # aligned to a source word outside the span
            return any(s not in words for s in sources.get(t, ()))

        found = _largest_free(covered, taken, elsewhere) if covered else None
        if found is None and covered:  # its words went to an earlier sibling: right after that one
            found = (taken.holding(covered[-1])[1],) * 2
        if found is None:
            at = min(max(anchors.at(span.first), lo), hi)
            found = (taken.outside(at),) * 2
        placed.append(found)
        if found[0] < found[1]:
            taken.add(found)
    return placed


class _Ranges:
    """Disjoint [a, b) ranges, sorted: which holds a word, in a bisection."""

    def __init__(self):
        self.starts: list[int] = []
        self.ranges: list[tuple[int, int]] = []

    def add(self, found: tuple[int, int]) -> None:
        k = bisect.bisect_left(self.starts, found[0])
        self.starts.insert(k, found[0])
        self.ranges.insert(k, found)

    def holding(self, t: int) -> tuple[int, int] | None:
        k = bisect.bisect_right(self.starts, t) - 1
        return self.ranges[k] if k >= 0 and self.ranges[k][0] <= t < self.ranges[k][1] else None

    def outside(self, at: int) -> int:
        """`at`, or the nearer edge of a range it falls inside."""
        found = self.holding(at)
        if found is None or found[0] == at:
            return at
        a, b = found
        return a if at - a <= b - at else b


def _by_source(pairs: list[tuple[int, int]], target_words: int) -> dict[int, list[int]]:
    found: dict[int, list[int]] = {}
    for s, t in pairs:
        if 0 <= t < target_words:
            found.setdefault(s, []).append(t)
    return found


def _within(targets: dict[int, list[int]], words: range, lo: int, hi: int) -> list[int]:
    """The target words in [lo, hi) aligned to `words`, in order."""
    return sorted(t for w in words for t in targets.get(w, ()) if lo <= t < hi)


def _largest_free(covered: list[int], taken: _Ranges, elsewhere) -> tuple[int, int] | None:
    """The run of covered words outside the `taken` ranges that holds the most of them (the first of
    equals), as a (first, stop) range; None where every covered word is taken. A run is broken by
    a taken word, or by two or more words in a row it does not cover of which one is aligned
    `elsewhere` (one stray word, such as an article aligned elsewhere, stays inside; words aligned
    to nothing or to the element's own words join it)."""
    runs: list[list[int]] = []
    for t in sorted(set(covered)):
        if taken.holding(t):
            continue
        gap = range(runs[-1][-1] + 1, t) if runs else range(0)
        if runs and not any(taken.holding(g) for g in gap) and (len(gap) <= 1 or not any(map(elsewhere, gap))):
            runs[-1].append(t)
        else:
            runs.append([t])
    if not runs:
        return None
    best = max(runs, key=len)
    return best[0], best[-1] + 1


class _Anchors:
    """Where something before source word `position` goes among the target words: before the
    first target word of the next aligned source word, else after the last of the one before,
    else at the same share of the sentence (each found once for every position)."""

    def __init__(self, targets: dict[int, list[int]], source_words: int, target_words: int):
        self.source_words, self.target_words = source_words, target_words
        self.after: list[int | None] = [None] * (source_words + 1)  # the next aligned word's first target
        for s in range(source_words - 1, -1, -1):
            self.after[s] = min(targets[s]) if s in targets else self.after[s + 1]
        self.before: list[int | None] = [None] * (source_words + 1)  # one past the last target before
        for s in range(source_words):
            self.before[s + 1] = max(targets[s]) + 1 if s in targets else self.before[s]

    def at(self, position: int) -> int:
        position = min(max(position, 0), self.source_words)
        if self.after[position] is not None:
            return self.after[position]
        if self.before[position] is not None:
            return self.before[position]
        return round(position * self.target_words / self.source_words) if self.source_words else 0


@dataclass
class _Frame:
    """An element render is writing: one past its last word, the next word, its children not yet
    written (the next last), what closes it, and whether the space before the next word is owed."""

    stop: int
    next_word: int
    kids: list[int]
    closing: str
    owed: bool = False


def render(words: list[str], spaces: list[str], spans: list[Span], ranges: list[tuple[int, int]]) -> str:
    """The target words with each span's tags around its range; `spaces[i]`: what goes before word
    i (outside a tag that begins there), `spaces[len(words)]` after the last word; a tag of no
    words goes right before the word it sits before (at the end: right after the last)."""
    words = list(words)  # the punctuation a tail-outside span leaves out is taken off its last word
    children: dict[int | None, list[int]] = {}
    for k in sorted(range(len(spans)), key=lambda k: (ranges[k][0], ranges[k][0] != ranges[k][1], k)):
        children.setdefault(spans[k].parent, []).append(k)

    out: list[str] = []
    # the elements being written, outermost first: a loop, not recursion, for any depth of nesting
    stack = [_Frame(len(words), 0, children.get(None, [])[::-1], "")]
    while stack:
        frame = stack[-1]
        i, kids = frame.next_word, frame.kids
        if kids and ranges[kids[-1]][0] <= i:
            k = kids.pop()
            a, b = ranges[k]
            if frame.owed and i < frame.stop:
                out.append(spaces[i])
                frame.owed = False
            after = ""
            if b > a and spans[k].tail and (found := TRAILING.fullmatch(words[b - 1])):
                words[b - 1], after = found.groups()
            if b > a:
                frame.next_word, frame.owed = b, True
            gap = spans[k].gap if b == a and i < frame.stop else ""
            out.append(spans[k].start_tag)
            stack.append(_Frame(b, a, children.get(k, [])[::-1], spans[k].end_tag + after + gap))
        elif i < frame.stop:
            out.append(spaces[i] + words[i] if frame.owed else words[i])
            frame.next_word, frame.owed = i + 1, True
        else:
            out.append(frame.closing)
            stack.pop()
    return spaces[0] + "".join(out) + spaces[len(words)]
