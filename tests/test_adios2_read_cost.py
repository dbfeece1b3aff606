"""Guards: the adios2 transport moves a step at about the cost of a plain ADIOS2 SST pair moving the same bytes.

The first guard measures what ``h5flow bench transit`` measures: the transport's time inside (write + read,
``h5flow.runner``'s rule) at 1:1, 32 MiB per step, with the oscillator computing on the producer and the
histogram on the consumer, against the plain pair of :mod:`h5flow.benchmarks.adios2_plain` (no h5flow code)
whose writer computes the same oscillator, in the same test: a ratio, never an absolute time. SST serves a
step's data on the writer's side, where the oscillator computes, so a pair whose writer computes nothing is
several times faster whatever the transport does (docs/ADIOS2.md); against the computing pair both sides pay
that alike. Version 2 of the stream format sent each dataset as its own ADIOS2 variable, each served as its
own request (six on the rank writing the oscillators mesh): 1.6-2x the computing pair. One payload per
stream and step: about 0.6-1.1x. The bound, 1.35x, the best of three measurements judged, sits between.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from h5flow.transports.adios2 import missing_reason

pytestmark = pytest.mark.skipif(missing_reason() is not None, reason=str(missing_reason()))

NBYTES, STEPS = 32 << 20, 5
MAX_RATIO = 1.35
ATTEMPTS = 3


def _inside_per_step(record: dict[str, Any]) -> list[float]:
    """Seconds inside the transport per step, write + read (one producer and one consumer rank)."""
    writes = {s: end - start - waited for s, start, end, waited in record["producer"]["ranks"][0]["io"]}
    reads = {io[0]: io[1] for io in record["consumer"]["ranks"][0]["io"]}
    return [writes[s] + reads[s] for s in sorted(writes) if s in reads]


def _ratio(where: Path) -> tuple[float, list[float], list[float]]:
    """One measurement: the transport, then the plain pair, back to back; (ratio of the median steps, both)."""
    from h5flow.benchmarks.adios2_plain import run_pair
    from h5flow.benchmarks.transit import oscillator_shape, transport_xml
    from h5flow.runner import RunOptions, run

    where.mkdir()
    config = where / "config.xml"
    config.write_text(transport_xml("adios2-sst", str(where / "stream"), 4))
    osc = ("--shape", *map(str, oscillator_shape(NBYTES, 1)), "--blocks", "1", "--ghost-cells", "0")
    ours = _inside_per_step(run(RunOptions(config, 1, 1, osc, STEPS, 60.0, workdir=where, show_progress=False)))
    plain = _inside_per_step(run_pair(str(where / "plain"), "sst", 1, 1, NBYTES, STEPS, timeout=60,
                                      oscillator=True))
    assert len(ours) == len(plain) == STEPS
    # medians per step: one step that lands on a burst of the other jobs' load moves neither
    return statistics.median(ours) / statistics.median(plain), ours, plain


@pytest.mark.slow
def test_transport_time_inside_with_the_oscillator_is_within_a_small_factor_of_plain_sst(tmp_path: Path) -> None:
    # Up to three measurements, the best one judged: one that lands on a burst of other jobs' load moves the ratio
    # (measured here: 1.0-1.1x with one payload; 1.6-2.0x with a variable per dataset).
    seen = []
    for attempt in range(ATTEMPTS):
        ratio, ours, plain = _ratio(tmp_path / f"try{attempt}")
        if ratio <= MAX_RATIO:
            return
        seen.append(f"{ratio:.1f}x ({statistics.median(ours) * 1e3:.0f} ms vs {statistics.median(plain) * 1e3:.0f} ms)")
    pytest.fail(f"the adios2 transport spent more than {MAX_RATIO}x the plain SST pair's time inside per step "
                f"(median of {STEPS} steps, 1:1, {NBYTES >> 20} MiB, the oscillator computing on both writers) in "
                f"each of {ATTEMPTS} "
                "measurements: " + ", ".join(seen))


def test_an_array_the_analysis_keeps_is_not_overwritten_by_the_next_step(tmp_path: Path) -> None:
    """The reader reuses its fetch buffers; never one a block handed out earlier still refers to."""
    import numpy as np
    from mpi4py import MPI

    from h5flow.config import TransportConfig
    from h5flow.transports import StepStatus, open_reader

    actors = Path(__file__).with_name("stream_actors.py")
    cfg = {"type": "adios2", "engine": "sst", "filename": str(tmp_path / "s")}
    w = subprocess.Popen([sys.executable, str(actors), "produce", json.dumps(cfg), "--steps", "3", "--shape", "16",
                          "16", "16", "--blocks", "1"], stdout=subprocess.DEVNULL)
    kept, copies = [], []
    try:
        with open_reader(MPI.COMM_SELF, TransportConfig.of(**cfg)) as r:
            while (res := r.begin_step(60.0)).status is StepStatus.OK:
                data = res.step.blocks("mesh", ["data"])[0].cell_arrays["data"]
                if not kept:
                    kept.append(data)  # held past release, as an analysis accumulating steps would
                copies.append(data.copy())
                r.release()
            assert res.status is StepStatus.END_OF_STREAM, res.reason
    finally:
        w.wait(timeout=60)
    assert len(copies) == 3 and not np.array_equal(copies[0], copies[1])  # the steps differ
    np.testing.assert_array_equal(kept[0], copies[0])


def test_payload_layout_packs_large_datasets_aligned_and_small_ones_inline() -> None:
    """Writer and reader place a rank's datasets from the step's metadata alone (stream format version 3)."""
    import numpy as np
    from mpi4py import MPI

    from h5flow.model import ImageBlock, ParticleBlock
    from h5flow.transports._common import StepPuts
    from h5flow.transports.adios2.stream import ALIGN, INLINE_BYTES, payload_layout

    puts = StepPuts()
    for b, z0 in ((0, 0), (1, 64)):  # two blocks of 64 x 64 x 64 cells: "data" 1 MiB each, "flag" 256 KiB each
        puts.add("mesh", ImageBlock(b, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, 63, 0, 63, z0, z0 + 63), 0,
                                    {"data": np.zeros((64, 64, 64), np.float32),
                                     "flag": np.zeros((64, 64, 64), np.int8)}))
    puts.add("particles", ParticleBlock(0, np.zeros((5, 3)), {"id": np.arange(5, dtype=np.int64)}))
    meta = puts.gather(MPI.COMM_SELF, 0, 0.0)
    slots, size, inline_size = payload_layout(meta, 0)
    where = {(s.mesh, s.path): s for s in slots}
    data, flag = where[("mesh", "cell/data")], where[("mesh", "cell/flag")]
    assert not data.inline and data.nbytes == 2 << 20 and data.spans == ((0, 0, 64 ** 3), (1, 64 ** 3, 64 ** 3))
    assert not flag.inline and flag.nbytes == 2 * 64 ** 3  # int8, 512 KiB: not small enough to go inline
    assert data.offset == 0 and flag.offset == 2 << 20 and size == (2 << 20) + 2 * 64 ** 3  # sorted by path
    pos, ids = where[("particles", "geometry/positions")], where[("particles", "point/id")]
    assert pos.inline and ids.inline and pos.nbytes == 5 * 3 * 8 and ids.nbytes == 5 * 8 < INLINE_BYTES
    assert all(s.offset % ALIGN == 0 for s in slots) and inline_size == max(s.offset + s.nbytes for s in (pos, ids))
    assert payload_layout(meta, 1) == ([], 0, 0)  # a rank with no block sends nothing
