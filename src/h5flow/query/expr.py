"""Query objects: what H5Qcreate/H5Qcombine build, as immutable Python values.

Four kinds of condition, as in HDF5's H5Q (``H5Q_TYPE_DATA_ELEM``, ``ATTR_VALUE``, ``ATTR_NAME``,
``LINK_NAME``), combined with ``&`` (H5Q_COMBINE_AND) and ``|`` (H5Q_COMBINE_OR)::

    from h5flow.query import Q
    q = (Q.data("/fields/temp") > 3.5) & (Q.attr("units") == "K")
    q = Q.data("/catalog/plate").between(4000, 4500) | Q.link_name("fiber_*")

A data condition names a dataset (``Q.data(path)``) or none (``Q.data()``: every numeric dataset, H5Q's
own semantics). Comparison operators: ``== != < <= > >=``; ranges with :meth:`DataRef.between`.
Values compare as numpy compares them (NaN: only ``!=`` holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Union

Op = Literal["==", "!=", "<", "<=", ">", ">="]
OPS: tuple[Op, ...] = ("==", "!=", "<", "<=", ">", ">=")
#: the operator seen from the other side: ``3 < x`` is ``x > 3``
FLIPPED: dict[str, Op] = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
Scalar = Union[int, float, bool, str]


class QueryError(ValueError):
    """A query that cannot be applied (a name that names nothing, datasets that are not aligned, ...)."""


class _Combinable:
    def __and__(self, other: object) -> Query:
        return And(_as_query(self), _as_query(other))

    def __or__(self, other: object) -> Query:
        return Or(_as_query(self), _as_query(other))

    def __bool__(self) -> bool:
        raise TypeError("a query has no truth value: combine conditions with & and | (not 'and'/'or'), "
                        "and write ranges as Q.data(p).between(lo, hi), not lo < Q.data(p) < hi")


def _as_query(obj: object) -> Query:
    if isinstance(obj, Query):
        return obj
    raise TypeError(f"cannot combine a query with {type(obj).__name__}: expected a condition such as "
                    "Q.data('/x') > 1")


class Query(_Combinable):
    """Base class of every query node."""

    def datasets(self) -> set[str]:
        """The dataset paths this query names."""
        return set()


@dataclass(frozen=True, eq=True)
class DataCond(Query):
    """``dataset op value`` on each element (H5Q_TYPE_DATA_ELEM); ``path`` None: every numeric dataset."""

    path: str | None
    op: Op
    value: int | float
    pos: int = -1  # position in the expression text, -1 when built from Python

    def datasets(self) -> set[str]:
        return {self.path} if self.path is not None else set()

    def __str__(self) -> str:
        return f"{self.path if self.path is not None else '*'} {self.op} {self.value!r}"


@dataclass(frozen=True, eq=True)
class AttrValue(Query):
    """An object with an attribute ``name`` whose value satisfies ``op value`` (H5Q_TYPE_ATTR_VALUE)."""

    name: str
    op: Op
    value: Scalar
    pos: int = -1

    def __str__(self) -> str:
        return f"@{self.name} {self.op} {self.value!r}"


@dataclass(frozen=True, eq=True)
class AttrName(Query):
    """An object with an attribute whose name matches a glob pattern (H5Q_TYPE_ATTR_NAME)."""

    pattern: str

    def __str__(self) -> str:
        return f"attr_name({self.pattern!r})"


@dataclass(frozen=True, eq=True)
class LinkName(Query):
    """An object whose last path component matches a glob pattern (H5Q_TYPE_LINK_NAME)."""

    pattern: str

    def __str__(self) -> str:
        return f"link_name({self.pattern!r})"


@dataclass(frozen=True, eq=True)
class Name(Query):
    """A bare name from the text grammar, bound when the query meets a file: a dataset with that link name
    under the location if there is exactly one, otherwise an attribute (``units == "K"``)."""

    name: str
    op: Op
    value: Scalar
    pos: int = -1

    def __str__(self) -> str:
        return f"{self.name} {self.op} {self.value!r}"


@dataclass(frozen=True, eq=True)
class And(Query):
    left: Query
    right: Query

    def datasets(self) -> set[str]:
        return self.left.datasets() | self.right.datasets()

    def __str__(self) -> str:
        return f"({self.left} & {self.right})"


@dataclass(frozen=True, eq=True)
class Or(Query):
    left: Query
    right: Query

    def datasets(self) -> set[str]:
        return self.left.datasets() | self.right.datasets()

    def __str__(self) -> str:
        return f"({self.left} | {self.right})"


def _number(value: object, what: str) -> int | float:
    import numpy as np

    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise TypeError(f"{what}: compare a dataset with a number, not {type(value).__name__} ({value!r})")


class DataRef:
    """``Q.data(path)``: compare it to build a :class:`DataCond`."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, path: str | None) -> None:
        if path is not None and (not isinstance(path, str) or not path):
            raise TypeError(f"Q.data(path): path must be a non-empty string or None, got {path!r}")
        self.path = path

    def _cond(self, op: Op, value: object) -> DataCond:
        return DataCond(self.path, op, _number(value, f"Q.data({self.path!r}) {op}"))

    def __eq__(self, v: object) -> DataCond:  # type: ignore[override]
        return self._cond("==", v)

    def __ne__(self, v: object) -> DataCond:  # type: ignore[override]
        return self._cond("!=", v)

    def __lt__(self, v: object) -> DataCond:
        return self._cond("<", v)

    def __le__(self, v: object) -> DataCond:
        return self._cond("<=", v)

    def __gt__(self, v: object) -> DataCond:
        return self._cond(">", v)

    def __ge__(self, v: object) -> DataCond:
        return self._cond(">=", v)

    def between(self, lo: object, hi: object, inclusive: Literal["both", "left", "right", "neither"] = "both"
                ) -> Query:
        """``lo <= x <= hi`` (``inclusive`` chooses which ends are closed)."""
        if inclusive not in ("both", "left", "right", "neither"):
            raise ValueError(f"inclusive must be both, left, right or neither, got {inclusive!r}")
        lop: Op = ">=" if inclusive in ("both", "left") else ">"
        hop: Op = "<=" if inclusive in ("both", "right") else "<"
        return And(self._cond(lop, lo), self._cond(hop, hi))


class AttrRef:
    """``Q.attr(name)``: compare it to build an :class:`AttrValue`."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, name: str) -> None:
        if not isinstance(name, str) or not name:
            raise TypeError(f"Q.attr(name): name must be a non-empty string, got {name!r}")
        self.name = name

    def _cond(self, op: Op, value: object) -> AttrValue:
        if not isinstance(value, (int, float, str, bool)):
            import numpy as np

            if isinstance(value, np.generic):
                value = value.item()
            else:
                raise TypeError(f"Q.attr({self.name!r}) {op}: compare with a number or a string, "
                                f"not {type(value).__name__}")
        return AttrValue(self.name, op, value)  # type: ignore[arg-type]

    def __eq__(self, v: object) -> AttrValue:  # type: ignore[override]
        return self._cond("==", v)

    def __ne__(self, v: object) -> AttrValue:  # type: ignore[override]
        return self._cond("!=", v)

    def __lt__(self, v: object) -> AttrValue:
        return self._cond("<", v)

    def __le__(self, v: object) -> AttrValue:
        return self._cond("<=", v)

    def __gt__(self, v: object) -> AttrValue:
        return self._cond(">", v)

    def __ge__(self, v: object) -> AttrValue:
        return self._cond(">=", v)


class Q:
    """Entry points for building queries (the H5Qcreate of this package)."""

    @staticmethod
    def data(path: str | None = None) -> DataRef:
        return DataRef(path)

    @staticmethod
    def attr(name: str) -> AttrRef:
        return AttrRef(name)

    @staticmethod
    def attr_name(pattern: str) -> AttrName:
        return AttrName(pattern)

    @staticmethod
    def link_name(pattern: str) -> LinkName:
        return LinkName(pattern)

    @staticmethod
    def parse(text: str) -> Query:
        from h5flow.query.grammar import parse

        return parse(text)
