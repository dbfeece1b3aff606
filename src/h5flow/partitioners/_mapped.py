"""SENSEI's ``MappedPartitioner``: an explicit owner for every block (``<block_id>``/``<block_owner>``)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from h5flow.model import BlockMeta
from h5flow.partitioners.base import PartitionError, Partitioner, PartitionerSettings
from h5flow.settings import free
from h5flow.xmlnode import ConfigError, XmlNode

if TYPE_CHECKING:
    from h5flow.config import PartitionerConfig

_LISTS = ("block_id", "block_owner")


@dataclass
class MappedSettings(PartitionerSettings):
    """``<partitioner type="mapped">`` with ``<block_id>`` and ``<block_owner>`` children (SENSEI's lists)."""

    XML_CHILDREN: ClassVar[tuple[str, ...]] = _LISTS

    block_ids: list[int] | None = free(lambda: None, "the blocks listed (<block_id>)")
    block_owners: list[int] | None = free(lambda: None, "the consumer rank of each (<block_owner>)")

    @classmethod
    def from_xml(cls, node: XmlNode) -> MappedSettings:
        lists: dict[str, tuple[XmlNode, list[tuple[int, int]]]] = {}
        for child in node.children(_LISTS):
            tag = child.el.tag
            if tag in lists:
                raise child.error(f"a second <{tag}> inside {node.describe()}",
                                  f"list all values in one <{tag}> (the first is on line {lists[tag][0].el.line})")
            child.check_attributes(())
            for grandchild in child.el.children:
                raise ConfigError(f"{node.path}:{grandchild.line}: unknown element <{grandchild.tag}> inside <{tag}>; "
                                  f"<{tag}> holds only integers separated by spaces or commas",
                                  path=node.path, line=grandchild.line)
            lists[tag] = (child, _int_list(child))
        for tag in _LISTS:
            if tag not in lists:
                raise node.error(f"missing <{tag}> inside {node.describe()}",
                                 "a mapped partitioner needs <block_id>0 1 2</block_id> and "
                                 "<block_owner>0 1 0</block_owner> of equal length")
        (ids_node, ids), (owners_node, owners) = lists["block_id"], lists["block_owner"]
        if len(ids) != len(owners):
            raise owners_node.error(f"<block_owner> lists {len(owners)} ranks but <block_id> (line "
                                    f"{ids_node.el.line}) lists {len(ids)} blocks inside {node.describe()}",
                                    "give one owner rank per block id", line=owners_node.el.text_line or None)
        seen: dict[int, int] = {}
        for block, line in ids:
            if block in seen:
                raise ids_node.error(f"block id {block} is listed twice in <block_id> (first on line {seen[block]})",
                                     "list each block once, with its owner at the same position in <block_owner>",
                                     line=line)
            seen[block] = line
        return cls(block_ids=[b for b, _ in ids], block_owners=[r for r, _ in owners])


def _int_list(node: XmlNode) -> list[tuple[int, int]]:
    """The integers of ``<block_id>``/``<block_owner>``, each with the line it is on."""
    text = node.el.text
    first = len(text) - len(text.lstrip())
    values = []
    for m in re.finditer(r"[^\s,]+", text):
        token, line = m.group(), (node.el.text_line or node.el.line) + text.count("\n", first, m.start())
        if not token.isdigit() or not token.isascii():
            raise node.error(f"bad value {token!r} in <{node.el.tag}>",
                             "accepted: integers >= 0 separated by spaces or commas", line=line)
        values.append((int(token), line))
    if not values:
        raise node.error(f"empty <{node.el.tag}>", "list integers >= 0 separated by spaces or commas")
    return values


def _ids(values: Sequence[int]) -> str:
    """A short list for messages: at most 10 values."""
    shown = ", ".join(str(v) for v in values[:10])
    return shown + (f", ... ({len(values)} in all)" if len(values) > 10 else "")


class MappedPartitioner(Partitioner):
    """Block ``block_ids[k]`` goes to consumer rank ``block_owners[k]``.

    Every block of the step must be listed exactly once, and every owner must be a consumer rank
    (``0 .. n_consumers - 1``); anything else raises :class:`PartitionError` naming the offending
    block id or owner and the valid range.
    """

    name = "mapped"
    SETTINGS = MappedSettings

    def __init__(self, block_ids: Sequence[int], block_owners: Sequence[int]) -> None:
        ids, owners = [int(b) for b in block_ids], [int(o) for o in block_owners]
        if len(ids) != len(owners):
            raise PartitionError(
                f"mapped partitioner: block_ids has {len(ids)} entries but block_owners has {len(owners)}; "
                "they must pair up one to one")
        dup = sorted(b for b, n in Counter(ids).items() if n > 1)
        if dup:
            raise PartitionError(
                f"mapped partitioner: block id {dup[0]} is listed {ids.count(dup[0])} times in block_ids "
                f"(duplicated ids: {_ids(dup)}); each block must be listed exactly once")
        bad = [b for b in ids if b < 0]
        if bad:
            raise PartitionError(f"mapped partitioner: block id {bad[0]} is negative; block ids start at 0")
        neg = [(b, o) for b, o in zip(ids, owners, strict=True) if o < 0]
        if neg:
            b, o = neg[0]
            raise PartitionError(f"mapped partitioner: block {b} has owner {o}; owners are consumer ranks >= 0")
        self.block_ids = ids
        self.block_owners = owners
        self._owner_of = dict(zip(ids, owners, strict=True))

    @classmethod
    def from_config(cls, cfg: PartitionerConfig) -> MappedPartitioner:
        s = cfg.settings
        if s.block_ids is None or s.block_owners is None:
            missing = " and ".join(n for n, v in (("block_ids", s.block_ids), ("block_owners", s.block_owners))
                                   if v is None)
            raise PartitionError(f"mapped partitioner needs block_ids and block_owners; {missing} not given")
        return cls(s.block_ids, s.block_owners)

    def owners(self, blocks: Sequence[BlockMeta], n_consumers: int) -> list[int]:
        if n_consumers < 1:
            raise PartitionError(f"n_consumers must be at least 1, got {n_consumers}")
        step_ids = [b.block_id for b in blocks]
        valid = f"0..{len(step_ids) - 1}" if step_ids else "none: the step has no blocks"
        missing = [b for b in step_ids if b not in self._owner_of]
        if missing:
            raise PartitionError(
                f"mapped partitioner: block id {missing[0]} is not listed in block_ids (missing: {_ids(missing)}); "
                f"the step has {len(step_ids)} blocks (ids {valid}) and each must be listed exactly once")
        known = set(step_ids)
        extra = [b for b in self.block_ids if b not in known]
        if extra:
            raise PartitionError(
                f"mapped partitioner: block id {extra[0]} in block_ids is not a block of the step "
                f"(unknown: {_ids(extra)}); the step has {len(step_ids)} blocks (ids {valid})")
        out = [self._owner_of[b] for b in step_ids]
        for b, o in zip(step_ids, out, strict=True):
            if o >= n_consumers:
                raise PartitionError(
                    f"mapped partitioner: block {b} is mapped to consumer rank {o}, outside the valid range "
                    f"0..{n_consumers - 1} ({n_consumers} consumer ranks)")
        return out

    def __repr__(self) -> str:
        return f"MappedPartitioner(block_ids={self.block_ids}, block_owners={self.block_owners})"
