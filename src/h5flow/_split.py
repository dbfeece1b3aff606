"""Splitting items contiguously over ranks (SENSEI's block formula), shared by the miniapps and transports."""

from __future__ import annotations


def contiguous_range(num_items: int, num_ranks: int, rank: int) -> range:
    """Items of ``rank`` when ``num_items`` are split contiguously (SENSEI's BlockPartitioner formula)."""
    n_local, n_large = divmod(num_items, num_ranks)
    start = n_local * rank + min(rank, n_large)
    return range(start, start + n_local + (1 if rank < n_large else 0))


def contiguous_owner(item: int, num_items: int, num_ranks: int) -> int:
    """The rank that :func:`contiguous_range` gives ``item`` to."""
    n_local, n_large = divmod(num_items, num_ranks)
    split = (n_local + 1) * n_large  # the first n_large ranks hold n_local + 1 items each
    return item // (n_local + 1) if item < split else n_large + (item - split) // n_local
