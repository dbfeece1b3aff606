"""The oscillator miniapp: deck parsing, oscillator formulas, decomposition, ghost cells, particles."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from h5flow.miniapps.oscillator import (
    DEFAULT_DECK,
    Decomposition,
    Oscillator,
    OscillatorConfig,
    OscillatorDeckError,
    Simulation,
    contiguous_owner,
    contiguous_range,
    parse_deck,
    read_deck,
)
from h5flow.model import ImageBlock

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "oscillators"


def field_at(oscillators: list[Oscillator], p: tuple[float, float, float], t: float) -> float:
    """The field at point ``p``, straight from the definition (scalar code)."""
    return sum(o.value(t) * math.exp(-sum((a - c) ** 2 for a, c in zip(p, o.center)) / (2 * o.radius**2))
               for o in oscillators)


def all_blocks(config: OscillatorConfig, size: int, step: int) -> dict[int, tuple[int, ImageBlock]]:
    """Every block of every rank at ``step``: block id -> (owner rank, block)."""
    out: dict[int, tuple[int, ImageBlock]] = {}
    for rank in range(size):
        sim = Simulation(config, rank, size)
        sim.advance(step)
        for b in sim.blocks():
            assert b.block_id not in out
            out[b.block_id] = (rank, b)
    return out


# -- decks -------------------------------------------------------------------------------------------


def test_sample_deck_is_the_default_deck() -> None:
    sample = read_deck(EXAMPLES / "sample.osc")
    assert sample == parse_deck(DEFAULT_DECK)
    assert [o.type for o in sample] == ["damped", "decaying", "periodic"]
    assert sample[0] == Oscillator("damped", (32.0, 32.0, 32.0), 10.0, 3.14, 0.3)
    assert Simulation(OscillatorConfig(), 0, 1).oscillators == sample


def test_periodic_64_deck() -> None:
    deck = read_deck(EXAMPLES / "periodic-64.osc")
    assert len(deck) == 8
    assert {o.center for o in deck} == {(x, y, z) for x in (16.0, 48.0) for y in (16.0, 48.0) for z in (16.0, 48.0)}
    assert all(o.type == "periodic" and o.radius == 8.0 and o.omega0 == 3.14 for o in deck)


def test_comments_and_blank_lines() -> None:
    text = "# header\n\n   \nperiodic 1 2 3 4 5  # trailing comment\n  # indented comment\ndecaying 1 1 1 1 1\n"
    deck = parse_deck(text)
    assert deck == [Oscillator("periodic", (1.0, 2.0, 3.0), 4.0, 5.0),
                    Oscillator("decaying", (1.0, 1.0, 1.0), 1.0, 1.0)]


@pytest.mark.parametrize(("line", "expected"), [
    ("dampd 32 32 32 10. 3.14 .3",
     "unknown oscillator type 'dampd'; expected one of damped, decaying, periodic"),
    ("damped 32 32 32 10. 3.14", "'damped' takes 6 numbers, got 5"),
    ("periodic 32 32 32 10. 3.14 .3", "'periodic' takes 5 numbers, got 6"),
    ("decaying 32 3x 32 10. 3.14", "cy '3x' is not a finite number; expected 'decaying cx cy cz r omega0'"),
    ("periodic 32 32 32 nan 3.14", "r 'nan' is not a finite number"),
    ("periodic 32 32 32 0 3.14", "r must be > 0, got 0.0"),
    ("periodic 32 32 32 1 0", "omega0 must be non-zero"),
    ("damped 32 32 32 10. 3.14 1.5", "zeta must be in [0, 1) for a damped oscillator, got 1.5"),
])
def test_deck_errors_name_file_line_and_text(tmp_path: Path, line: str, expected: str) -> None:
    path = tmp_path / "sample.osc"
    path.write_text(f"# comment\nperiodic 1 1 1 1 1\n{line}\n")
    with pytest.raises(OscillatorDeckError) as err:
        read_deck(path)
    msg = str(err.value)
    assert msg.startswith(f"{path}:3: ")
    assert expected in msg
    assert isinstance(err.value, ValueError)


def test_unknown_type_message_exactly() -> None:
    with pytest.raises(OscillatorDeckError, match=r"^sample\.osc:3: unknown oscillator type 'dampd'; "
                                                  r"expected one of damped, decaying, periodic$"):
        parse_deck("#\n\ndampd 32 32 32 10. 3.14 .3\n", "sample.osc")


def test_empty_deck_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "empty.osc"
    path.write_text("# nothing\n\n")
    with pytest.raises(OscillatorDeckError, match=f"^{path}: no oscillators"):
        read_deck(path)
    with pytest.raises(FileNotFoundError):
        read_deck(tmp_path / "missing.osc")


# -- formulas ----------------------------------------------------------------------------------------


def test_periodic_value() -> None:
    o = Oscillator("periodic", (0.0, 0.0, 0.0), 1.0, 2.0)
    assert o.value(0.0) == 0.0
    assert o.value(0.125) == pytest.approx(0.3826834323650898, rel=1e-12)  # sin((2 pi / 8) / 2) = sin(pi/8)
    assert o.value(0.5) == pytest.approx(1.0, rel=1e-12)  # sin(pi / 2)


def test_decaying_value() -> None:
    o = Oscillator("decaying", (0.0, 0.0, 0.0), 1.0, 2.0)
    assert o.value(0.25) == pytest.approx(0.22507907903927651, rel=1e-12)  # sin(pi/4) / (2 * pi/2)
    assert o.value(0.0) == pytest.approx(0.25)  # the t -> 0 limit 1 / omega0^2
    assert o.value(1e-12) == pytest.approx(0.25, rel=1e-9)
    assert math.isfinite(o.value(0.0))


def test_damped_value() -> None:
    assert Oscillator("damped", (0.0, 0.0, 0.0), 1.0, 3.14, 0.3).value(0.0) == pytest.approx(0.0, abs=1e-15)
    # zeta = 0: phi = pi/2, 1 - sin(w t + pi/2) = 1 - cos(w t); w t = pi/2 gives 1
    assert Oscillator("damped", (0.0, 0.0, 0.0), 1.0, 1.0, 0.0).value(0.25) == pytest.approx(1.0, rel=1e-12)
    # zeta = 0.6, omega0 = 1, 2 pi t = 1: 1 - exp(-0.6) sin(0.8 + acos 0.6) / 0.8
    assert Oscillator("damped", (0.0, 0.0, 0.0), 1.0, 1.0, 0.6).value(1 / (2 * math.pi)) == pytest.approx(
        0.3223692235340603, rel=1e-12)


def test_global_field_matches_the_definition() -> None:
    config = OscillatorConfig(shape=(12, 10, 8), bounds=(-1.0, 5.0, 0.0, 10.0, 2.0, 6.0))
    sim = Simulation(config, 0, 1)
    oscs = [Oscillator("damped", (2.0, 5.0, 4.0), 2.0, 3.14, 0.3), Oscillator("decaying", (0.0, 2.0, 3.0), 1.5, 2.5),
            Oscillator("periodic", (4.0, 8.0, 5.0), 3.0, 1.57)]
    sim.oscillators = oscs
    assert sim.origin == (-1.0, 0.0, 2.0) and sim.spacing == (0.5, 1.0, 0.5)
    field = sim.global_field(7)
    assert field.dtype == np.float32 and field.shape == (8, 10, 12)
    t = 7 * config.dt
    for k, j, i in [(0, 0, 0), (7, 9, 11), (3, 4, 5), (5, 1, 9)]:
        p = (-1.0 + (i + 0.5) * 0.5, (j + 0.5) * 1.0, 2.0 + (k + 0.5) * 0.5)
        assert field[k, j, i] == pytest.approx(field_at(oscs, p, t), rel=1e-6, abs=1e-7)


# -- steps and configuration -------------------------------------------------------------------------


def test_steps_and_time() -> None:
    assert OscillatorConfig().num_steps() == 1000
    assert OscillatorConfig(t_end=0.05).num_steps() == 5
    assert OscillatorConfig(t_end=0.055).num_steps() == 6
    assert OscillatorConfig(steps=3).num_steps() == 3
    sim = Simulation(OscillatorConfig(shape=(4, 4, 4), steps=3), 0, 1)
    assert sim.num_steps() == 3
    assert sim.advance(2) == pytest.approx(0.02)
    assert sim.step == 2


def test_configuration_errors() -> None:
    with pytest.raises(ValueError, match="nblocks"):
        Simulation(OscillatorConfig(nblocks=2), 0, 3)
    with pytest.raises(ValueError, match="cannot split 4x4x4 cells into 7 blocks"):
        Simulation(OscillatorConfig(shape=(4, 4, 4), nblocks=7), 0, 1)
    with pytest.raises(ValueError, match="rank 2"):
        Simulation(OscillatorConfig(), 2, 2)
    with pytest.raises(ValueError, match="dt"):
        OscillatorConfig(dt=0.0)
    with pytest.raises(ValueError, match="bounds"):
        OscillatorConfig(bounds=(0.0, 1.0, 1.0, 1.0, 0.0, 1.0))
    with pytest.raises(ValueError, match="shape"):
        OscillatorConfig(shape=(4, 0, 4))
    with pytest.raises(RuntimeError, match="advance"):
        Simulation(OscillatorConfig(shape=(4, 4, 4)), 0, 1).blocks()


# -- decomposition -----------------------------------------------------------------------------------


def test_contiguous_assignment() -> None:
    for items in range(0, 13):
        for ranks in range(1, 6):
            got = [list(contiguous_range(items, ranks, r)) for r in range(ranks)]
            assert sum(got, []) == list(range(items))
            assert max(map(len, got)) - min(map(len, got)) <= 1
            for r, ids in enumerate(got):
                assert all(contiguous_owner(i, items, ranks) == r for i in ids)
    assert list(contiguous_range(10, 4, 1)) == [3, 4, 5]  # nLocal = 2, nLarge = 2: rank 1 gets [2*1+1, +3)


@pytest.mark.parametrize(("shape", "nblocks", "divisions"), [
    ((64, 64, 64), 8, (2, 2, 2)),
    ((64, 64, 64), 6, (3, 2, 1)),
    ((64, 64, 64), 12, (3, 2, 2)),
    ((10, 100, 10), 4, (1, 4, 1)),
    ((8, 16, 32), 8, (1, 2, 4)),  # 8^3 blocks
    ((5, 7, 3), 5, (1, 5, 1)),
])
def test_divisions(shape: tuple[int, int, int], nblocks: int, divisions: tuple[int, int, int]) -> None:
    assert Decomposition.regular(shape, nblocks).divisions == divisions


@pytest.mark.parametrize(("size", "nblocks", "shape"), [
    (1, None, (16, 16, 16)),
    (2, None, (8, 8, 8)),
    (3, 7, (13, 9, 8)),
    (4, 6, (10, 11, 12)),
    (2, 12, (17, 16, 15)),
    (5, 5, (5, 7, 3)),
    (3, 10, (9, 9, 9)),
    (4, 27, (7, 8, 9)),
])
def test_blocks_tile_the_grid(size: int, nblocks: int | None, shape: tuple[int, int, int]) -> None:
    config = OscillatorConfig(shape=shape, nblocks=nblocks)
    blocks = all_blocks(config, size, 0)
    n = nblocks or size
    assert sorted(blocks) == list(range(n))
    cover = np.zeros(shape[::-1], dtype=np.int32)
    for bid, (rank, b) in blocks.items():
        assert Simulation(config, 0, size).owner(bid) == rank
        i0, i1, j0, j1, k0, k1 = b.extent
        cover[k0:k1 + 1, j0:j1 + 1, i0:i1 + 1] += 1
    assert (cover == 1).all()
    ranks = [sorted(bid for bid, (r, _) in blocks.items() if r == rank) for rank in range(size)]
    assert sum(ranks, []) == list(range(n))  # contiguous ranges in rank order
    for axis in range(3):  # block sizes along an axis differ by at most one cell
        sizes = {b.cell_shape[2 - axis] for _, b in blocks.values()}
        assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize(("size", "nblocks", "shape", "ghost"), [
    (1, 1, (6, 5, 4), 1),
    (2, 8, (10, 9, 8), 1),
    (3, 6, (11, 7, 9), 2),
    (2, 4, (9, 9, 9), 0),
    (1, 2, (3, 4, 5), 3),  # ghost wider than a block
])
def test_block_arrays_interior_and_ghosts(size: int, nblocks: int, shape: tuple[int, int, int], ghost: int) -> None:
    config = OscillatorConfig(deck=EXAMPLES / "periodic-64.osc", shape=shape, nblocks=nblocks, ghost=ghost,
                              bounds=(0.0, 64.0, 0.0, 64.0, 0.0, 64.0))
    step = 13
    reference = Simulation(config, 0, size).global_field(step)
    padded = np.pad(reference, ghost, mode="wrap")  # periodic neighbours around the whole grid
    for _, b in all_blocks(config, size, step).values():
        i0, i1, j0, j1, k0, k1 = b.extent
        data = b.cell_arrays["data"]
        nk, nj, ni = b.cell_shape
        assert data.dtype == np.float32
        assert data.shape == (nk + 2 * ghost, nj + 2 * ghost, ni + 2 * ghost)
        assert b.ghost == ghost and b.origin == (0.0, 0.0, 0.0)
        assert b.spacing == (64.0 / shape[0], 64.0 / shape[1], 64.0 / shape[2])
        np.testing.assert_array_equal(b.interior("data"), reference[k0:k1 + 1, j0:j1 + 1, i0:i1 + 1])
        np.testing.assert_array_equal(data, padded[k0:k1 + 1 + 2 * ghost, j0:j1 + 1 + 2 * ghost, i0:i1 + 1 + 2 * ghost])


def test_ghost_equals_the_neighbouring_blocks_interior() -> None:
    config = OscillatorConfig(shape=(8, 6, 4), nblocks=2)  # two blocks split along x, one per rank
    blocks = all_blocks(config, 2, 40)
    (_, left), (_, right) = blocks[0], blocks[1]
    assert left.extent == (0, 3, 0, 5, 0, 3) and right.extent == (4, 7, 0, 5, 0, 3)
    lg, rg = left.cell_arrays["data"], right.cell_arrays["data"]
    # left block's +x ghost layer is right block's first interior x-layer, and (periodic) vice versa
    np.testing.assert_array_equal(lg[1:-1, 1:-1, -1], rg[1:-1, 1:-1, 1])
    np.testing.assert_array_equal(lg[1:-1, 1:-1, 0], rg[1:-1, 1:-1, -2])
    # the y and z ghosts wrap onto the block itself (one block along y and z)
    np.testing.assert_array_equal(lg[1:-1, 0, 1:-1], lg[1:-1, -2, 1:-1])
    np.testing.assert_array_equal(lg[-1, 1:-1, 1:-1], lg[1, 1:-1, 1:-1])
    assert np.abs(lg).max() > 0


def test_default_configuration_blocks() -> None:
    sim = Simulation(OscillatorConfig(), 1, 4)
    assert sim.block_ids == [1]
    sim.advance(100)
    (b,) = sim.blocks()
    assert b.extent == (32, 63, 0, 31, 0, 63)
    assert b.cell_arrays["data"].shape == (66, 34, 34)
    assert sim.global_extent == (0, 63, 0, 63, 0, 63)


# -- particles ---------------------------------------------------------------------------------------


def test_particles_ids_positions_and_determinism() -> None:
    config = OscillatorConfig(shape=(16, 16, 16), nblocks=4, particles=50)
    per_rank = []
    for rank in range(2):
        sim = Simulation(config, rank, 2)
        sim.advance(20)
        per_rank += sim.particle_blocks()
        for p, b in zip(sim.particle_blocks(), sim.blocks()):
            i0, i1, j0, j1, k0, k1 = b.extent
            lo, hi = np.array([i0, j0, k0]), np.array([i1 + 1, j1 + 1, k1 + 1])
            assert ((p.positions >= lo) & (p.positions <= hi)).all()
            assert p.positions.shape == (p.num_points, 3) and p.arrays["velocity"].shape == (p.num_points, 3)
            assert p.arrays["velocity"].dtype == np.float32 and p.arrays["pid"].dtype == np.int64
    assert [p.num_points for p in per_rank] == [13, 13, 12, 12]
    assert np.concatenate([p.arrays["pid"] for p in per_rank]).tolist() == list(range(50))
    serial = Simulation(config, 0, 1)  # same blocks on one rank: same particles
    serial.advance(20)
    for a, b in zip(serial.particle_blocks(), per_rank):
        np.testing.assert_array_equal(a.positions, b.positions)


def test_particles_move_along_the_gradient() -> None:
    config = OscillatorConfig(shape=(16, 16, 16), particles=8, v_scale=50.0)
    sim = Simulation(config, 0, 1)
    sim.oscillators = [Oscillator("periodic", (8.0, 8.0, 8.0), 4.0, 1.0)]
    sim.advance(0)
    p0 = sim.particle_blocks()[0]
    sim.advance(5)
    p5 = sim.particle_blocks()[0]
    assert not np.allclose(p0.positions, p5.positions)
    t, h = sim.time, 1e-5
    oscs = sim.oscillators
    for x, v in zip(p5.positions.astype(np.float64), p5.arrays["velocity"]):
        fd = [(field_at(oscs, tuple(x + h * e), t) - field_at(oscs, tuple(x - h * e), t)) / (2 * h) for e in np.eye(3)]
        np.testing.assert_allclose(v, 50.0 * np.array(fd), rtol=1e-3, atol=1e-6)
    np.testing.assert_allclose(p5.arrays["velocityMagnitude"], np.linalg.norm(p5.arrays["velocity"], axis=1), rtol=1e-5)
    sim.advance(2)  # going back replays from the initial positions
    again = Simulation(config, 0, 1)
    again.oscillators = sim.oscillators
    again.advance(2)
    np.testing.assert_array_equal(sim.particle_blocks()[0].positions, again.particle_blocks()[0].positions)


def test_particle_counts() -> None:
    assert [p.num_points for p in _advanced(OscillatorConfig(shape=(8, 8, 8), nblocks=2)).particle_blocks()] == [0, 0]
    negative = _advanced(OscillatorConfig(shape=(8, 8, 8), nblocks=2, particles=-1)).particle_blocks()
    assert [p.num_points for p in negative] == [64, 64]
    assert _advanced(OscillatorConfig(shape=(8, 8, 8), particles=5, seed=-1)).particle_blocks()[0].num_points == 5


def _advanced(config: OscillatorConfig) -> Simulation:
    sim = Simulation(config, 0, 1)
    sim.advance(1)
    return sim
