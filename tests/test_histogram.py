"""SENSEI's histogram analysis: ghost cells ignored, global min/max, bins+1 slots reduced to rank 0."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from h5flow import analyses
from h5flow._registry import UnknownPluginError
from h5flow.analyses import make_analysis
from h5flow.analyses._histogram import Histogram, HistogramResult, histogram_of, read_result, result_path
from h5flow.config import AnalysisConfig
from h5flow.model import ArrayMeta, Association, Block, BlockMeta, ImageBlock, MeshMeta, ParticleBlock, StepMeta
from h5flow.partitioners._mapped import MappedPartitioner
from h5flow.testing.pytest_mpi import mpi_assert
from h5flow.transports.base import ReadStep

GHOST_VALUE = 1e30  # stored in ghost layers: a histogram that reads them gets a huge range


class FakeStep(ReadStep):
    """A step whose blocks are already in memory; this rank sees the blocks ``assignment`` gives it."""

    def __init__(self, step: int, time: float, meshes: dict[str, list[Block]], assignment: dict[str, list[int]],
                 arrays: dict[str, list[ArrayMeta]]) -> None:
        metas = {}
        for name, blocks in meshes.items():
            kind = "image" if all(isinstance(b, ImageBlock) for b in blocks) else "particles"
            metas[name] = MeshMeta(name, kind, [BlockMeta.of(b, 0) for b in blocks], arrays[name])
        super().__init__(step, time, StepMeta(step, time, 1, metas), assignment)
        self._meshes = meshes
        self.requests: list[tuple[str, tuple[str, ...], str]] = []

    def blocks(self, mesh: str, arrays: Sequence[str] = (), association: Association = "cell") -> list[Block]:
        self._check_mesh(mesh)
        self.requests.append((mesh, tuple(arrays), association))
        by_id = {b.block_id: b for b in self._meshes[mesh]}
        return [by_id[i] for i in self.my_block_ids(mesh)]


def image_block(block_id: int, shape: tuple[int, int, int], ghost: int, rng: np.random.Generator,
                offset: float = 0.0) -> ImageBlock:
    """A block whose cell and point arrays ``data`` have random interiors and ghost layers of ±1e30."""
    nk, nj, ni = shape
    arrays = {}
    for assoc, extra in (("cell", 0), ("point", 1)):
        full = np.full((nk + extra + 2 * ghost, nj + extra + 2 * ghost, ni + extra + 2 * ghost), GHOST_VALUE)
        if ghost:
            full[0] = -GHOST_VALUE
        g = tuple(slice(ghost, n - ghost) for n in full.shape)
        full[g] = offset + rng.normal(size=full[g].shape) * (block_id + 1)
        arrays[assoc] = full
    return ImageBlock(block_id, (0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0, ni - 1, 0, nj - 1, 0, nk - 1), ghost,
                      cell_arrays={"data": arrays["cell"]}, point_arrays={"data": arrays["point"]})


def image_arrays() -> list[ArrayMeta]:
    return [ArrayMeta("data", "cell", "<f8"), ArrayMeta("pdata", "point", "<f8")]


def point_meta() -> list[ArrayMeta]:
    return [ArrayMeta("data", "point", "<f8")]


def blocks_of(num: int, seed: int, ghost: int = 2) -> list[Block]:
    rng = np.random.default_rng(seed)
    return [image_block(i, (3 + i % 3, 4, 5 + i % 2), ghost, rng, offset=10.0 * i) for i in range(num)]


def all_interiors(blocks: Sequence[Block], association: Association = "cell") -> np.ndarray:
    return np.concatenate([np.ravel(b.interior("data", association)) for b in blocks])


def run_serial(blocks: Sequence[Block], bins: int = 10, association: Association = "cell",
               file: str | Path | None = None, ids: Sequence[int] | None = None, step: int = 3,
               arrays: list[ArrayMeta] | None = None) -> HistogramResult:
    from mpi4py import MPI

    analysis = Histogram("mesh", "data", association, bins, file)
    analysis.initialize(MPI.COMM_SELF)
    fake = FakeStep(step, 0.25, {"mesh": list(blocks)},
                    {"mesh": list(range(len(blocks))) if ids is None else list(ids)},
                    {"mesh": arrays or (image_arrays() if association == "cell" else point_meta())})
    result = analysis.execute(fake)
    assert isinstance(result, HistogramResult)
    assert fake.requests == [("mesh", ("data",), association)]
    assert analysis.last is result and analysis.finalize() is result
    return result


@pytest.mark.parametrize("bins", [1, 2, 7, 10, 64])
def test_counts_match_the_reference_and_ghosts_are_ignored(bins: int) -> None:
    blocks = blocks_of(5, seed=bins)
    values = all_interiors(blocks)
    res = run_serial(blocks, bins)
    lo, hi, counts = histogram_of(values, bins)
    assert res.range == (lo, hi) == (values.min(), values.max())  # no ±1e30 from the ghost layers
    assert res.counts.dtype == np.int64 and res.counts.shape == (bins,)
    assert np.array_equal(res.counts, counts) and res.total == values.size
    assert res.edges.shape == (bins + 1,) and res.edges[0] == lo and res.edges[-1] == hi
    assert np.all(np.diff(res.edges) > 0)
    assert (res.step, res.time, res.mesh, res.array, res.bins, res.nonfinite) == (3, 0.25, "mesh", "data", bins, 0)


def test_point_association_uses_the_point_interior() -> None:
    blocks = blocks_of(3, seed=7, ghost=1)
    values = all_interiors(blocks, "point")
    res = run_serial(blocks, 6, "point")
    assert values.size == sum(np.prod(np.array(b.cell_shape) + 1) for b in blocks)
    assert np.array_equal(res.counts, histogram_of(values, 6)[2]) and res.range == (values.min(), values.max())


def test_particle_blocks_have_no_ghosts() -> None:
    rng = np.random.default_rng(3)
    blocks = [ParticleBlock(i, rng.normal(size=(n, 3)), {"data": rng.exponential(size=n)})
              for i, n in enumerate((50, 0, 17))]
    res = run_serial(blocks, 5, "point")
    values = np.concatenate([b.arrays["data"] for b in blocks])
    assert np.array_equal(res.counts, histogram_of(values, 5)[2]) and res.total == 67


def test_max_lands_in_the_last_bin_and_bins_follow_sensei_rule() -> None:
    values = np.arange(11, dtype=np.float64)  # 0..10, 10 bins of width 1: 10 == max joins bin 9
    lo, hi, counts = histogram_of(values, 10)
    assert (lo, hi) == (0.0, 10.0) and counts.tolist() == [1] * 9 + [2]
    block = ParticleBlock(0, np.zeros((11, 3)), {"data": values})
    res = run_serial([block], 10, "point")
    assert res.counts.tolist() == [1] * 9 + [2] and res.edges.tolist() == [float(i) for i in range(11)]
    # integer data on exact edges agrees with numpy (right edge inclusive in the last bin, as here)
    ints = np.random.default_rng(0).integers(0, 101, size=5000).astype(np.float64)
    ints[:2] = (0, 100)
    assert np.array_equal(histogram_of(ints, 10)[2], np.histogram(ints, bins=10, range=(0, 100))[0])


def test_file_output_in_sensei_format(tmp_path: Path) -> None:
    prefix = tmp_path / "out" / "nested" / "hist"
    blocks = blocks_of(2, seed=11)
    res = run_serial(blocks, 4, file=prefix, step=12)
    path = result_path(prefix, "mesh", "data", 12)
    assert path == tmp_path / "out" / "nested" / "hist_mesh_data_12.txt" and path.is_file()
    lines = path.read_text().splitlines()
    assert [line.split(" : ")[0] for line in lines] == ["step", "time", "num bins", "range", "bin edges", "counts"]
    assert lines[0] == "step : 12" and lines[1] == "time : 0.25" and lines[2] == "num bins : 4"
    parsed = read_result(path)
    assert [float(x) for x in parsed["range"]] == list(res.range)
    assert [float(x) for x in parsed["bin edges"]] == res.edges.tolist()
    assert [int(x) for x in parsed["counts"]] == res.counts.tolist()
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left behind


def test_constant_field_gives_a_valid_histogram() -> None:
    block = ParticleBlock(0, np.zeros((20, 3)), {"data": np.full(20, 4.5)})
    res = run_serial([block], 8, "point")
    assert res.counts.tolist() == [20] + [0] * 7
    assert res.range[0] == 4.5 and res.range[1] > 4.5 and np.all(np.diff(res.edges) > 0)
    assert histogram_of(np.full(5, -3e12), 3)[2].tolist() == [5, 0, 0]


def test_no_data_and_nonfinite_values() -> None:
    res = run_serial(blocks_of(3, seed=1), 4, ids=[])  # this rank (the only one) holds no block
    assert res.counts.tolist() == [0, 0, 0, 0] and math.isnan(res.range[0]) and np.isnan(res.edges).all()
    data = np.array([np.nan, 1.0, np.inf, 2.0, -np.inf, 3.0])
    res = run_serial([ParticleBlock(0, np.zeros((6, 3)), {"data": data})], 2, "point")
    assert res.counts.tolist() == [1, 2] and res.range == (1.0, 3.0) and res.nonfinite == 3


def test_range_wider_than_float64_stays_finite() -> None:
    lo, hi, counts = histogram_of(np.array([-1e308, 1e308, 0.5e308]), 2)
    assert (lo, hi, counts.tolist()) == (-1e308, 1e308, [1, 2])
    res = run_serial([ParticleBlock(0, np.zeros((2, 3)), {"data": np.array([-1e308, 1e308])})], 2, "point")
    assert res.edges.tolist() == [-1e308, 0.0, 1e308] and res.counts.tolist() == [1, 1]


def test_float32_and_integer_arrays() -> None:
    f32 = np.random.default_rng(5).normal(size=300).astype(np.float32)
    res = run_serial([ParticleBlock(0, np.zeros((300, 3)), {"data": f32})], 9, "point")
    assert np.array_equal(res.counts, histogram_of(f32, 9)[2]) and res.range == (float(f32.min()), float(f32.max()))
    ints = np.arange(-5, 6, dtype=np.int32)
    res = run_serial([ParticleBlock(0, np.zeros((11, 3)), {"data": ints})], 5, "point")
    assert res.counts.tolist() == [2, 2, 2, 2, 3]


def test_metadata_errors_are_clear() -> None:
    with pytest.raises(ValueError, match=r"is a cell array; set association=\"cell\""):
        run_serial(blocks_of(1, seed=0), arrays=[ArrayMeta("data", "cell", "<f8")], association="point")
    with pytest.raises(ValueError, match="has 3 components"):
        run_serial(blocks_of(1, seed=0), arrays=[ArrayMeta("data", "cell", "<f8", 3)])
    with pytest.raises(KeyError, match="has no array 'data'"):
        run_serial(blocks_of(1, seed=0), arrays=[ArrayMeta("other", "cell", "<f8")])
    fake = FakeStep(0, 0.0, {"grid": blocks_of(1, seed=0)}, {"grid": [0]}, {"grid": image_arrays()})
    analysis = Histogram("mesh", "data")
    with pytest.raises(RuntimeError, match=r"initialize\(comm\)"):
        analysis.execute(fake)
    from mpi4py import MPI

    analysis.initialize(MPI.COMM_SELF)
    with pytest.raises(KeyError, match="no mesh 'mesh'; meshes: grid"):
        analysis.execute(fake)


def test_make_analysis_and_registry() -> None:
    assert "histogram" in analyses.registry.names()
    h = make_analysis(AnalysisConfig.of("histogram", mesh="m", array="a", association="POINT", bins=12, file="out/h"))
    assert isinstance(h, Histogram) and h.name == "histogram"
    assert (h.mesh, h.array, h.association, h.bins, h.file) == ("m", "a", "point", 12, "out/h")
    for bad in (0, -3):
        with pytest.raises(ValueError, match=f"bins={bad}: accepted: an integer >= 1"):
            make_analysis(AnalysisConfig.of(bins=bad))
    with pytest.raises(ValueError, match="association='face': accepted: cell, point"):
        make_analysis(AnalysisConfig.of(association="face"))
    with pytest.raises(UnknownPluginError, match=r"unknown analysis 'catalyst'; known: .*histogram"):
        make_analysis(AnalysisConfig("catalyst"))


@pytest.mark.mpi(n=3)
def test_three_ranks_reduce_to_rank_zero(comm, mpi_tmp_path: Path) -> None:
    blocks = blocks_of(7, seed=42)  # the same global blocks on every rank; each reads only its own
    part = MappedPartitioner([0, 1, 2, 3, 4, 5, 6], [1, 0, 0, 1, 1, 0, 1])  # rank 2 holds no block
    mesh = MeshMeta("mesh", "image", [BlockMeta.of(b, 0) for b in blocks], image_arrays())
    mine = part.assign(mesh, comm.size, comm.rank)
    analysis = make_analysis(AnalysisConfig.of("histogram", mesh="mesh", array="data", association="cell", bins=13,
                                                       file=str(mpi_tmp_path / "h")))
    analysis.initialize(comm)
    res = analysis.execute(FakeStep(0, 1.5, {"mesh": blocks}, {"mesh": mine}, {"mesh": image_arrays()}))
    mpi_assert(comm, (res is not None) == (comm.rank == 0), "only rank 0 holds the result")
    mpi_assert(comm, (comm.rank == 2) == (not mine), "rank 2 holds no block")
    if comm.rank == 0:
        assert res is not None
        values = all_interiors(blocks)
        lo, hi, counts = histogram_of(values, 13)
        assert res.range == (lo, hi) and np.array_equal(res.counts, counts) and res.total == values.size
        assert res.counts.sum() > sum(b.interior("data").size for b in blocks if b.block_id in mine)

    # step 1: a constant field that only rank 1 holds; rank 0 (no data) still gets the result
    const = [ParticleBlock(0, np.zeros((9, 3)), {"data": np.full(9, 2.0)})]
    step = FakeStep(1, 2.5, {"mesh": const}, {"mesh": [0] if comm.rank == 1 else []}, {"mesh": point_meta()})
    analysis = Histogram("mesh", "data", "point", 3, mpi_tmp_path / "c")
    analysis.initialize(comm)
    res = analysis.execute(step)
    if comm.rank == 0:
        assert res is not None and res.counts.tolist() == [9, 0, 0] and res.range[0] == 2.0
    comm.Barrier()
    files = sorted(p.name for p in mpi_tmp_path.iterdir())
    mpi_assert(comm, files == ["c_mesh_data_1.txt", "h_mesh_data_0.txt"], f"rank 0 writes one file per step: {files}")
