"""SENSEI's ``oscillator`` miniapp as a numpy producer.

The field is a sum of oscillators, each weighted by a Gaussian around its centre, sampled at the cell
centres of a regular grid. The grid is split into ``nblocks`` blocks (a regular 3-D decomposition, block
ids with x fastest); producer ranks own contiguous ranges of block ids (SENSEI's ``ContiguousAssigner``).
Every block carries ``ghost`` layers whose values wrap periodically around the global grid, so a ghost
cell equals the interior cell of the neighbouring block. Optional particles are advected by
``v_scale * grad(field)`` and wrapped back into their block.

Deck format (``.osc``): one oscillator per line, ``type cx cy cz r omega0 [zeta]``; ``type`` is one of
``damped`` (needs ``zeta``), ``decaying`` or ``periodic``; ``#`` starts a comment.

No MPI is used here: a :class:`Simulation` is one producer rank's share, given its rank and the rank count.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

import numpy as np

from h5flow._split import contiguous_owner, contiguous_range  # noqa: F401 - re-exported
from h5flow.model import ImageBlock, ParticleBlock

OscillatorType = Literal["damped", "decaying", "periodic"]
OSCILLATOR_TYPES: tuple[OscillatorType, ...] = ("damped", "decaying", "periodic")
DEFAULT_SEED = 0x240DC6A9
PARTICLES_PER_BLOCK = 64  # particles per block when OscillatorConfig.particles is negative (SENSEI's -p -1)

#: The deck used when :attr:`OscillatorConfig.deck` is None; same content as ``examples/oscillators/sample.osc``.
DEFAULT_DECK = """\
# h5flow oscillator deck for the default 64^3 grid
# type      cx   cy   cz   r     omega0  [zeta, damped only]
damped      32   32   32   10.   3.14    .3
decaying    16   48   20   8.    2.5
periodic    50   14   44   6.    1.57
"""
DEFAULT_DECK_NAME = "<default deck>"

_USAGE = {
    "damped": "damped cx cy cz r omega0 zeta",
    "decaying": "decaying cx cy cz r omega0",
    "periodic": "periodic cx cy cz r omega0",
}
_FIELDS = ("cx", "cy", "cz", "r", "omega0", "zeta")


class OscillatorDeckError(ValueError):
    """A deck that cannot be read; the message starts with ``file:line:``."""


@dataclass(frozen=True)
class Oscillator:
    """One oscillator: its kind, centre, Gaussian radius ``r``, ``omega0`` and (damped only) ``zeta``."""

    type: OscillatorType
    center: tuple[float, float, float]
    radius: float
    omega0: float
    zeta: float = 0.0

    def __post_init__(self) -> None:
        if self.type not in OSCILLATOR_TYPES:
            raise ValueError(f"unknown oscillator type {self.type!r}; expected one of {', '.join(OSCILLATOR_TYPES)}")
        if not self.radius > 0:
            raise ValueError(f"r must be > 0, got {self.radius}")
        if self.omega0 == 0:
            raise ValueError("omega0 must be non-zero")
        if self.type == "damped" and not 0 <= self.zeta < 1:
            raise ValueError(f"zeta must be in [0, 1) for a damped oscillator, got {self.zeta}")

    def value(self, t: float) -> float:
        """The oscillator's amplitude at simulation time ``t`` (scaled by 2*pi inside, as SENSEI does)."""
        ts = 2.0 * math.pi * t
        w = self.omega0
        if self.type == "damped":
            phi = math.acos(self.zeta)
            wd = math.sqrt(1.0 - self.zeta**2) * w  # the damped frequency
            return 1.0 - math.exp(-self.zeta * w * ts) * math.sin(wd * ts + phi) / math.sin(phi)
        if self.type == "decaying":
            if ts == 0.0:
                return 1.0 / (w * w)  # the limit of sin(t/w)/(w t) as t -> 0
            return math.sin(ts / w) / (w * ts)
        return math.sin(ts / w)


def parse_deck(text: str, source: str = "<deck>") -> list[Oscillator]:
    """Oscillators of a deck's text; ``source`` names it in error messages."""
    out: list[Oscillator] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{source}:{lineno}"
        tokens = line.split()
        if tokens[0] not in OSCILLATOR_TYPES:
            raise OscillatorDeckError(
                f"{where}: unknown oscillator type {tokens[0]!r}; expected one of {', '.join(OSCILLATOR_TYPES)}")
        kind = cast(OscillatorType, tokens[0])
        usage = _USAGE[kind]
        want = 6 if kind == "damped" else 5
        if len(tokens) - 1 != want:
            raise OscillatorDeckError(
                f"{where}: {kind!r} takes {want} numbers, got {len(tokens) - 1} in {line!r}; expected '{usage}'")
        nums: list[float] = []
        for name, tok in zip(_FIELDS, tokens[1:]):
            try:
                v = float(tok)
            except ValueError:
                v = math.nan
            if not math.isfinite(v):
                raise OscillatorDeckError(f"{where}: {name} {tok!r} is not a finite number; expected '{usage}'")
            nums.append(v)
        try:
            out.append(Oscillator(kind, (nums[0], nums[1], nums[2]), nums[3], nums[4], nums[5] if want == 6 else 0.0))
        except ValueError as e:
            raise OscillatorDeckError(f"{where}: {e} in {line!r}; expected '{usage}'") from None
    if not out:
        raise OscillatorDeckError(f"{source}: no oscillators; expected lines 'type cx cy cz r omega0 [zeta]' "
                                  f"with type one of {', '.join(OSCILLATOR_TYPES)}")
    return out


def read_deck(path: str | os.PathLike[str]) -> list[Oscillator]:
    """Oscillators of an ``.osc`` file."""
    return parse_deck(Path(path).read_text(), str(path))


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Decomposition:
    """A regular split of ``shape`` (nx, ny, nz) cells into ``divisions`` (dx, dy, dz) blocks, x fastest."""

    shape: tuple[int, int, int]
    divisions: tuple[int, int, int]

    @staticmethod
    def regular(shape: tuple[int, int, int], nblocks: int) -> Decomposition:
        """The most even split of ``shape`` into ``nblocks``: factors sorted onto the axes by length.

        Among the factorisations ``a >= b >= c`` of ``nblocks`` (the largest factor going to the longest
        axis) it picks the one with the smallest largest block, then the smallest cut area.
        """
        if nblocks < 1:
            raise ValueError(f"nblocks must be at least 1, got {nblocks}")
        axes = sorted(range(3), key=lambda a: -shape[a])  # longest first; ties keep x before y before z
        best: tuple[tuple[int, int], tuple[int, int, int]] | None = None
        for a in _divisors(nblocks):
            for b in _divisors(nblocks // a):
                c = nblocks // a // b
                if not a >= b >= c:
                    continue
                divs = [1, 1, 1]
                for axis, d in zip(axes, (a, b, c)):
                    divs[axis] = d
                if any(d > n for d, n in zip(divs, shape)):
                    continue
                largest = math.prod(-(-n // d) for n, d in zip(shape, divs))
                cut = sum((divs[i] - 1) * shape[(i + 1) % 3] * shape[(i + 2) % 3] for i in range(3))
                cand = ((largest, cut), (divs[0], divs[1], divs[2]))
                if best is None or cand[0] < best[0]:
                    best = cand
        if best is None:
            raise ValueError(f"cannot split {shape[0]}x{shape[1]}x{shape[2]} cells into {nblocks} blocks: "
                             "every factorisation into 3 factors has a factor larger than its axis")
        return Decomposition(shape, best[1])

    @property
    def num_blocks(self) -> int:
        return self.divisions[0] * self.divisions[1] * self.divisions[2]

    def coords(self, block_id: int) -> tuple[int, int, int]:
        """The block's (bx, by, bz) position in the block grid."""
        if not 0 <= block_id < self.num_blocks:
            raise ValueError(f"block id {block_id} is outside 0..{self.num_blocks - 1}")
        dx, dy, _ = self.divisions
        return (block_id % dx, (block_id // dx) % dy, block_id // (dx * dy))

    def extent(self, block_id: int) -> tuple[int, int, int, int, int, int]:
        """The block's interior cells, inclusive: (i0, i1, j0, j1, k0, k1)."""
        out: list[int] = []
        for n, d, c in zip(self.shape, self.divisions, self.coords(block_id)):
            cells = contiguous_range(n, d, c)
            out += [cells.start, cells.stop - 1]
        return (out[0], out[1], out[2], out[3], out[4], out[5])


@dataclass
class OscillatorConfig:
    """The miniapp's parameters (SENSEI's command-line options)."""

    deck: Path | None = None  # None: DEFAULT_DECK
    shape: tuple[int, int, int] = (64, 64, 64)  # global cells (nx, ny, nz)
    nblocks: int | None = None  # None: one block per producer rank
    ghost: int = 1
    dt: float = 0.01
    t_end: float = 10.0
    steps: int | None = None  # overrides t_end / dt
    bounds: tuple[float, float, float, float, float, float] | None = None  # x0 x1 y0 y1 z0 z1; None: [0, n] per axis
    particles: int = 0  # total particles; negative: PARTICLES_PER_BLOCK per block
    v_scale: float = 50.0
    seed: int = DEFAULT_SEED  # -1: seeded from the OS

    def __post_init__(self) -> None:
        if self.deck is not None:
            self.deck = Path(self.deck)
        if len(self.shape) != 3 or any(int(n) < 1 for n in self.shape):
            raise ValueError(f"shape must be 3 positive cell counts, got {self.shape}")
        self.shape = (int(self.shape[0]), int(self.shape[1]), int(self.shape[2]))
        if self.nblocks is not None and self.nblocks < 1:
            raise ValueError(f"nblocks must be at least 1, got {self.nblocks}")
        if self.ghost < 0:
            raise ValueError(f"ghost must be >= 0, got {self.ghost}")
        if not (math.isfinite(self.dt) and self.dt > 0):
            raise ValueError(f"dt must be a positive number, got {self.dt}")
        if not (math.isfinite(self.t_end) and self.t_end >= 0):
            raise ValueError(f"t_end must be a number >= 0, got {self.t_end}")
        if self.steps is not None and self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")
        if self.bounds is not None:
            b = tuple(float(v) for v in self.bounds)
            ordered = len(b) == 6 and all(b[2 * a + 1] > b[2 * a] for a in range(3))
            if not ordered or not all(math.isfinite(v) for v in b):
                raise ValueError(f"bounds must be x0 x1 y0 y1 z0 z1 with x0 < x1, y0 < y1, z0 < z1, got {self.bounds}")
            self.bounds = (b[0], b[1], b[2], b[3], b[4], b[5])
        if not math.isfinite(self.v_scale):
            raise ValueError(f"v_scale must be a finite number, got {self.v_scale}")
        if self.seed < -1:
            raise ValueError(f"seed must be >= 0, or -1 for a seed from the OS, got {self.seed}")

    def num_steps(self) -> int:
        """``steps`` if given, else the steps of time ``k*dt`` below ``t_end`` (1000 by default)."""
        if self.steps is not None:
            return self.steps
        n = self.t_end / self.dt
        return max(0, math.ceil(n - 1e-9 * max(1.0, n)))

    def geometry(self) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
        """The global grid's (origin, spacing)."""
        b = self.bounds or (0.0, float(self.shape[0]), 0.0, float(self.shape[1]), 0.0, float(self.shape[2]))
        origin = (b[0], b[2], b[4])
        spacing = tuple((b[2 * a + 1] - b[2 * a]) / self.shape[a] for a in range(3))
        return origin, (spacing[0], spacing[1], spacing[2])


class Simulation:
    """One producer rank's share of the oscillator miniapp."""

    def __init__(self, config: OscillatorConfig, rank: int, size: int) -> None:
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"rank {rank} is outside 0..{size - 1}")
        nblocks = config.nblocks if config.nblocks is not None else size
        if nblocks < size:
            raise ValueError(f"nblocks ({nblocks}) must be at least the number of producer ranks ({size})")
        self.config = config
        self.rank = rank
        self.size = size
        self.oscillators: list[Oscillator] = (read_deck(config.deck) if config.deck is not None
                                              else parse_deck(DEFAULT_DECK, DEFAULT_DECK_NAME))
        self.decomposition = Decomposition.regular(config.shape, nblocks)
        self.block_ids: list[int] = list(contiguous_range(nblocks, size, rank))
        self.origin, self.spacing = config.geometry()
        self.step: int | None = None
        self.time = 0.0
        self._fields: dict[int, np.ndarray] = {}
        self._init_particles()

    # -- layout ---------------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        return self.decomposition.num_blocks

    @property
    def global_extent(self) -> tuple[int, int, int, int, int, int]:
        """The whole grid's cells, inclusive: (0, nx-1, 0, ny-1, 0, nz-1)."""
        nx, ny, nz = self.config.shape
        return (0, nx - 1, 0, ny - 1, 0, nz - 1)

    def owner(self, block_id: int) -> int:
        """The producer rank that owns ``block_id``."""
        self.decomposition.coords(block_id)  # range check
        return contiguous_owner(block_id, self.num_blocks, self.size)

    def num_steps(self) -> int:
        return self.config.num_steps()

    # -- field ----------------------------------------------------------------------------------------

    def _centres(self, axis: int, start: int, stop: int) -> np.ndarray:
        """Cell-centre coordinates of global cells start..stop-1 on ``axis``, wrapped periodically."""
        idx = np.arange(start, stop) % self.config.shape[axis]
        return self.origin[axis] + (idx + 0.5) * self.spacing[axis]

    def _evaluate(self, xs: np.ndarray, ys: np.ndarray, zs: np.ndarray, t: float) -> np.ndarray:
        """The field on the tensor grid ``zs x ys x xs`` at time ``t``, float32 in (z, y, x) order."""
        acc = np.zeros((zs.size, ys.size, xs.size), dtype=np.float64)
        for osc in self.oscillators:
            inv = 1.0 / (2.0 * osc.radius**2)
            cx, cy, cz = osc.center
            gx = np.exp(-((xs - cx) ** 2) * inv)
            gy = np.exp(-((ys - cy) ** 2) * inv)
            gz = np.exp(-((zs - cz) ** 2) * inv) * osc.value(t)
            acc += (gz[:, None, None] * gy[None, :, None]) * gx[None, None, :]
        return acc.astype(np.float32)

    def _block_field(self, block_id: int, t: float) -> np.ndarray:
        i0, i1, j0, j1, k0, k1 = self.decomposition.extent(block_id)
        g = self.config.ghost
        return self._evaluate(self._centres(0, i0 - g, i1 + g + 1), self._centres(1, j0 - g, j1 + g + 1),
                              self._centres(2, k0 - g, k1 + g + 1), t)

    def global_field(self, step: int) -> np.ndarray:
        """The whole grid at ``step`` without ghosts, (nz, ny, nx) float32, computed in-process."""
        nx, ny, nz = self.config.shape
        return self._evaluate(self._centres(0, 0, nx), self._centres(1, 0, ny), self._centres(2, 0, nz),
                              step * self.config.dt)

    def advance(self, step: int) -> float:
        """Compute this rank's blocks (and particles) for ``step``; returns its time ``step * dt``."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        t = step * self.config.dt
        self._fields = {b: self._block_field(b, t) for b in self.block_ids}
        self._advect_to(step)
        self.step, self.time = step, t
        return t

    def _require_step(self) -> None:
        if self.step is None:
            raise RuntimeError("no step computed yet: call advance(step) first")

    def blocks(self) -> list[ImageBlock]:
        """This rank's blocks of the ``mesh`` mesh at the current step, with a float32 cell array ``data``."""
        self._require_step()
        return [ImageBlock(b, self.origin, self.spacing, self.decomposition.extent(b), self.config.ghost,
                           cell_arrays={"data": self._fields[b]}) for b in self.block_ids]

    # -- particles ------------------------------------------------------------------------------------

    def _block_box(self, block_id: int) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper corners of the block's interior in space."""
        i0, i1, j0, j1, k0, k1 = self.decomposition.extent(block_id)
        o, s = np.asarray(self.origin), np.asarray(self.spacing)
        return o + np.array([i0, j0, k0]) * s, o + np.array([i1 + 1, j1 + 1, k1 + 1]) * s

    def _init_particles(self) -> None:
        total = self.config.particles if self.config.particles >= 0 else PARTICLES_PER_BLOCK * self.num_blocks
        self.num_particles = total
        self._pid: dict[int, np.ndarray] = {}
        self._p0: dict[int, np.ndarray] = {}
        for b in self.block_ids:
            ids = contiguous_range(total, self.num_blocks, b)
            seed = None if self.config.seed == -1 else [self.config.seed, b]
            rng = np.random.default_rng(seed)
            lo, hi = self._block_box(b)
            self._pid[b] = np.arange(ids.start, ids.stop, dtype=np.int64)
            self._p0[b] = lo + rng.random((len(ids), 3)) * (hi - lo)
        self._pos = {b: p.copy() for b, p in self._p0.items()}
        self._pstep = 0

    def gradient(self, points: np.ndarray, t: float) -> np.ndarray:
        """The field's gradient at ``points`` (n, 3) at time ``t``, float64 (n, 3)."""
        grad = np.zeros_like(points, dtype=np.float64)
        for osc in self.oscillators:
            d = points - np.asarray(osc.center)
            r2 = osc.radius**2
            w = osc.value(t) * np.exp(-np.einsum("ij,ij->i", d, d) / (2.0 * r2)) / r2
            grad -= w[:, None] * d
        return grad

    def _advect_to(self, step: int) -> None:
        """Move the particles (explicit Euler, one ``dt`` per step) from their step to ``step``."""
        if not self.num_particles:
            return
        if step < self._pstep:
            self._pos = {b: p.copy() for b, p in self._p0.items()}
            self._pstep = 0
        dt = self.config.dt
        while self._pstep < step:
            t = self._pstep * dt
            for b, pos in self._pos.items():
                lo, hi = self._block_box(b)
                pos += dt * self.config.v_scale * self.gradient(pos, t)
                pos[:] = lo + np.mod(pos - lo, hi - lo)
                np.copyto(pos, lo, where=pos >= hi)  # mod may round a tiny negative offset up to hi
            self._pstep += 1

    def particle_blocks(self) -> list[ParticleBlock]:
        """This rank's blocks of the ``particles`` mesh (one per grid block; empty when particles is 0).

        Arrays: ``pid`` (int64), ``velocity`` (float32, n x 3) and ``velocityMagnitude`` (float32).
        """
        self._require_step()
        out: list[ParticleBlock] = []
        for b in self.block_ids:
            pos = self._pos[b]
            vel = self.config.v_scale * self.gradient(pos, self.time)
            out.append(ParticleBlock(b, pos.astype(np.float32), {
                "pid": self._pid[b].copy(),
                "velocity": vel.astype(np.float32),
                "velocityMagnitude": np.linalg.norm(vel, axis=1).astype(np.float32),
            }))
        return out


__all__ = ["DEFAULT_DECK", "DEFAULT_SEED", "OSCILLATOR_TYPES", "Decomposition", "Oscillator", "OscillatorConfig",
           "OscillatorDeckError", "OscillatorType", "Simulation", "contiguous_owner", "contiguous_range",
           "parse_deck", "read_deck"]


def oscillator_shape(bytes_per_rank: int, producers: int) -> tuple[int, int, int]:
    """A global grid whose regular split into ``producers`` blocks gives each rank ~bytes_per_rank of float32."""
    cells = max(1, bytes_per_rank // 4)
    side = 1 << max(0, int(math.log2(round(cells ** (1 / 3)))))
    nz = max(1, cells // (side * side))
    return (side, side, nz * producers)
