"""Time inside the transport as the run record counts it (``runner._io_seconds``): a rank waiting for another
rank's compute or analysis is not in the transport, on either side."""

from __future__ import annotations

import pytest

from h5flow.runner import _io_seconds


def _part(*ranks: list[tuple[float, ...]]) -> dict:
    return {"ranks": [{"rank": r, "io": io} for r, io in enumerate(ranks)]}


def test_producer_counts_from_the_last_arrival_less_backpressure() -> None:
    # (step, start, end, waited): rank 1 arrives 5 s late (its compute); both return at 7; 1 s of backpressure
    part = _part([(0, 0.0, 7.0, 1.0)], [(0, 5.0, 7.0, 1.0)])
    assert _io_seconds(part) == pytest.approx(1.0)


def test_one_consumer_rank_counts_its_reading_time() -> None:
    part = _part([(0, 0.4, 0.0), (1, 0.6, 0.0)])
    assert _io_seconds(part) == pytest.approx(1.0)


def test_consumers_waiting_at_release_for_a_slower_analysis_count_from_the_last_arrival() -> None:
    # (step, seconds, barrier): rank 0 read in 0.2 s and then waited 3 s at release for rank 1's analysis;
    # rank 1 read in 0.5 s and waited 0.01 s (the barrier's own cost, paid by the last to arrive)
    part = _part([(0, 3.2, 3.0)], [(0, 0.51, 0.01)])
    assert _io_seconds(part) == pytest.approx(0.5 + 0.01)
    # the slowest reader is counted whole, even when it is not the last at the barrier
    part = _part([(0, 2.0, 0.0)], [(0, 0.3, 0.2)])
    assert _io_seconds(part) == pytest.approx(2.0)


def test_two_element_records_are_the_slowest_ranks_time() -> None:
    # (step, seconds): the plain ADIOS2 pair's records and records written before the barrier was kept
    part = _part([(0, 3.2), (1, 1.0)], [(0, 0.5), (1, 2.0)])
    assert _io_seconds(part) == pytest.approx(3.2 + 2.0)
