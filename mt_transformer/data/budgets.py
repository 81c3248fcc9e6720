"""Batches by a token budget: the one rule training, validation, scoring and translation cut
their ordered inputs into batches with."""

from __future__ import annotations

from collections.abc import Sequence


def budget_batches(order: Sequence, sizes: Sequence[int], max_tokens: int) -> list:
    """`order` (indices) cut, as it is ordered, into consecutive batches of at most `max_tokens`
    padded tokens: count * the largest of their `sizes` (each index's padded length). An index
    over the budget on its own gets a batch of its own. Training and translation batch with it."""
    bounds, start, longest = [0], 0, 0
    for position, size in enumerate(sizes):
        longest_with = max(longest, size)
        if position > start and longest_with * (position - start + 1) > max_tokens:
            bounds.append(position)
            start, longest_with = position, size
        longest = longest_with
    bounds.append(len(order))
    return [order[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]
