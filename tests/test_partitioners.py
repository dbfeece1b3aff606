"""The M:N partitioners (block, planar, mapped): pure functions of the block list and the consumer count."""

from __future__ import annotations

import itertools
import random

import pytest

from h5flow import partitioners
from h5flow._registry import UnknownPluginError
from h5flow.config import PartitionerConfig
from h5flow.model import BlockMeta, MeshMeta
from h5flow.partitioners import PartitionError, Partitioner, make_partitioner
from h5flow.partitioners._block import BlockPartitioner, block_range
from h5flow.partitioners._mapped import MappedPartitioner
from h5flow.partitioners._planar import PlanarPartitioner

# (num_blocks, n_consumers): B < N, B == N, B > N divisible and not, single block/consumer, no blocks
COMBOS = sorted({(b, n) for b in (0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 31, 64, 100) for n in (1, 2, 3, 4, 5, 8, 16, 17)}
                | {(1000, 7), (7, 1000), (257, 256)})


def make_blocks(num_blocks: int, producers: int = 3) -> list[BlockMeta]:
    """Image-block metadata as M = ``producers`` ranks would publish it (M is irrelevant to partitioners)."""
    return [BlockMeta(i, i % producers, "image", 8, 27, (i, i, 0, 1, 0, 1), (0.0, 0.0, 0.0), (1.0, 1.0, 1.0))
            for i in range(num_blocks)]


def make_mesh(num_blocks: int) -> MeshMeta:
    return MeshMeta("mesh", "image", make_blocks(num_blocks), [])


def random_mapping(num_blocks: int, n_consumers: int, seed: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    ids = list(range(num_blocks))
    rng.shuffle(ids)
    return ids, [rng.randrange(n_consumers) for _ in ids]


def all_partitioners(num_blocks: int, n_consumers: int) -> list[Partitioner]:
    ids, owners = random_mapping(num_blocks, n_consumers, seed=num_blocks * 1009 + n_consumers)
    return [BlockPartitioner(), PlanarPartitioner(), PlanarPartitioner(3), MappedPartitioner(ids, owners)]


@pytest.mark.parametrize(("num_blocks", "n_consumers"), COMBOS)
def test_every_block_owned_exactly_once_by_a_valid_rank(num_blocks: int, n_consumers: int) -> None:
    mesh = make_mesh(num_blocks)
    for part in all_partitioners(num_blocks, n_consumers):
        owners = part.owners(mesh.blocks, n_consumers)
        assert len(owners) == num_blocks, part
        assert all(isinstance(o, int) and 0 <= o < n_consumers for o in owners), part
        per_rank = [part.assign(mesh, n_consumers, r) for r in range(n_consumers)]
        flat = sorted(itertools.chain.from_iterable(per_rank))
        assert flat == list(range(num_blocks)), part  # each block exactly once across the ranks
        assert all(ids == sorted(ids) for ids in per_rank), part


@pytest.mark.parametrize(("num_blocks", "n_consumers"), COMBOS)
def test_block_gives_contiguous_balanced_ranges(num_blocks: int, n_consumers: int) -> None:
    mesh = make_mesh(num_blocks)
    owners = BlockPartitioner().owners(mesh.blocks, n_consumers)
    assert owners == sorted(owners)  # contiguous ranges, in rank order
    sizes = [owners.count(r) for r in range(n_consumers)]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the larger ranges go to the first ranks, as in SENSEI
    n_local, n_large = divmod(num_blocks, n_consumers)
    for r in range(n_consumers):
        start = n_local * r + min(r, n_large)
        expected = list(range(start, start + n_local + (1 if r < n_large else 0)))
        assert BlockPartitioner().assign(mesh, n_consumers, r) == expected
        assert list(block_range(num_blocks, n_consumers, r)) == expected


def test_block_examples() -> None:
    mesh = make_mesh(10)
    assert [BlockPartitioner().assign(mesh, 4, r) for r in range(4)] == [[0, 1, 2], [3, 4, 5], [6, 7], [8, 9]]
    few = make_mesh(2)  # fewer blocks than ranks: the last ranks get nothing
    assert [BlockPartitioner().assign(few, 4, r) for r in range(4)] == [[0], [1], [], []]


@pytest.mark.parametrize(("num_blocks", "n_consumers"), COMBOS)
def test_planar_is_round_robin_in_chunks(num_blocks: int, n_consumers: int) -> None:
    for plane_size in (1, 2, 3, 5, 64):
        owners = PlanarPartitioner(plane_size).owners(make_blocks(num_blocks), n_consumers)
        assert owners == [(i // plane_size) % n_consumers for i in range(num_blocks)], plane_size


def test_planar_examples_and_bad_plane_size() -> None:
    assert PlanarPartitioner().owners(make_blocks(7), 3) == [0, 1, 2, 0, 1, 2, 0]
    assert PlanarPartitioner(2).owners(make_blocks(9), 3) == [0, 0, 1, 1, 2, 2, 0, 0, 1]
    for bad in (0, -1):
        with pytest.raises(PartitionError, match=r"plane_size must be an integer >= 1"):
            PlanarPartitioner(bad)
    with pytest.raises(PartitionError, match="plane_size"):
        make_partitioner(PartitionerConfig.of("planar", plane_size=0))


def test_mapped_follows_the_lists_in_any_order() -> None:
    part = MappedPartitioner([3, 0, 2, 1], [1, 0, 1, 2])
    assert part.owners(make_blocks(4), 3) == [0, 2, 1, 1]
    assert part.assign(make_mesh(4), 3, 1) == [2, 3]


@pytest.mark.parametrize(
    ("ids", "owners", "num_blocks", "n_consumers", "message"),
    [
        ([0, 1, 3], [0, 0, 1], 4, 2, r"block id 2 is not listed in block_ids .*4 blocks \(ids 0\.\.3\)"),
        ([0, 1, 2, 3, 4], [0] * 5, 4, 2, r"block id 4 in block_ids is not a block of the step .*ids 0\.\.3"),
        ([0, 1, 2, 3], [0, 1, 2, 1], 4, 2, r"block 2 is mapped to consumer rank 2, outside the valid range 0\.\.1"),
        ([0], [5], 1, 1, r"consumer rank 5, outside the valid range 0\.\.0"),
    ],
)
def test_mapped_errors_name_the_block_and_the_range(
        ids: list[int], owners: list[int], num_blocks: int, n_consumers: int, message: str) -> None:
    with pytest.raises(PartitionError, match=message):
        MappedPartitioner(ids, owners).owners(make_blocks(num_blocks), n_consumers)


def test_mapped_list_errors_at_construction() -> None:
    with pytest.raises(PartitionError, match=r"block id 1 is listed 2 times in block_ids"):
        MappedPartitioner([0, 1, 1, 2], [0, 0, 0, 0])
    with pytest.raises(PartitionError, match=r"block_ids has 3 entries but block_owners has 2"):
        MappedPartitioner([0, 1, 2], [0, 0])
    with pytest.raises(PartitionError, match=r"block 1 has owner -1"):
        MappedPartitioner([0, 1], [0, -1])
    with pytest.raises(PartitionError, match=r"block id -2 is negative"):
        MappedPartitioner([0, -2], [0, 0])
    with pytest.raises(PartitionError, match=r"needs block_ids and block_owners; block_owners not given"):
        make_partitioner(PartitionerConfig.of("mapped", block_ids=[0, 1]))


def test_n_consumers_must_be_positive() -> None:
    for part in all_partitioners(4, 2):
        with pytest.raises(PartitionError, match="n_consumers must be at least 1"):
            part.owners(make_blocks(4), 0)
        with pytest.raises(PartitionError, match=r"rank 2 is outside 0\.\.1"):
            part.assign(make_mesh(4), 2, 2)


def test_make_partitioner_builds_each_type_from_its_config() -> None:
    block = make_partitioner(PartitionerConfig())
    assert isinstance(block, BlockPartitioner) and block.name == "block"
    planar = make_partitioner(PartitionerConfig.of("Planar", plane_size=4))
    assert isinstance(planar, PlanarPartitioner) and planar.plane_size == 4 and planar.name == "planar"
    mapped = make_partitioner(PartitionerConfig.of("mapped", block_ids=[1, 0], block_owners=[0, 1]))
    assert isinstance(mapped, MappedPartitioner) and mapped.owners(make_blocks(2), 2) == [1, 0]


def test_unknown_type_lists_the_known_ones() -> None:
    with pytest.raises(UnknownPluginError, match=r"unknown partitioner 'slice'; known: block, mapped, planar"):
        make_partitioner(PartitionerConfig("slice"))


def test_registry_names() -> None:
    assert partitioners.registry.names() == ["block", "mapped", "planar"]
