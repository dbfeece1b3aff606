"""``h5flow trace show DIR``: what a trace says, as tables, and a per-rank timeline PNG."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class Summary:
    """The tables of ``trace show``, as DataFrames (also what tests and other tools read)."""

    ops: pd.DataFrame      # per op: calls, time, bytes, share of the traced time
    objects: pd.DataFrame  # top objects by time
    ranks: pd.DataFrame    # per rank: calls, time in HDF5, bytes, ratio to the mean
    nranks: int
    records: int
    span: float            # seconds from the first record's start to the last record's end
    imbalance: float       # slowest rank's time in HDF5 / mean over ranks (1.0: balanced)


def summarize(df: pd.DataFrame, top: int = 10) -> Summary:
    total = float(df["dur"].sum()) or 1.0
    ops = (df.groupby("op").agg(calls=("dur", "size"), time=("dur", "sum"), bytes=("bytes", "sum"))
           .sort_values("time", ascending=False))
    ops["share"] = ops["time"] / total
    named = df[df["obj"] != ""]
    objects = (named.groupby(["file", "obj"]).agg(calls=("dur", "size"), time=("dur", "sum"),
                                                  bytes=("bytes", "sum"))
               .sort_values("time", ascending=False).head(top))
    ranks = df.groupby("rank").agg(calls=("dur", "size"), time=("dur", "sum"), bytes=("bytes", "sum"))
    mean = float(ranks["time"].mean()) if len(ranks) else 0.0
    ranks["vs_mean"] = ranks["time"] / mean if mean > 0 else 1.0
    span = float(df["t1"].max() - df["t0"].min()) if len(df) else 0.0
    imbalance = float(ranks["time"].max() / mean) if mean > 0 else 1.0
    return Summary(ops=ops, objects=objects, ranks=ranks, nranks=int(df["rank"].nunique()), records=len(df),
                   span=span, imbalance=imbalance)


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def _fmt_time(s: float) -> str:
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} µs"


def render(directory: Path, s: Summary) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    console.print(f"[bold]{directory}[/]: {s.records} calls from {s.nranks} rank(s) over {_fmt_time(s.span)}; "
                  f"rank imbalance (slowest / mean time in HDF5) {s.imbalance:.2f}")
    t = Table(title="time per operation")
    for c in ("op", "calls", "time", "share", "bytes"):
        t.add_column(c, justify="left" if c == "op" else "right")
    for op, row in s.ops.iterrows():
        t.add_row(str(op), str(int(row["calls"])), _fmt_time(row["time"]), f"{100 * row['share']:.1f} %",
                  _fmt_bytes(row["bytes"]) if row["bytes"] else "")
    console.print(t)
    t = Table(title=f"top {len(s.objects)} objects by time")
    for c in ("file", "object", "calls", "time", "bytes"):
        t.add_column(c, justify="left" if c in ("file", "object") else "right")
    for (file, obj), row in s.objects.iterrows():
        t.add_row(Path(str(file)).name, str(obj), str(int(row["calls"])), _fmt_time(row["time"]),
                  _fmt_bytes(row["bytes"]) if row["bytes"] else "")
    console.print(t)
    t = Table(title="per rank")
    for c in ("rank", "calls", "time in HDF5", "vs mean", "bytes"):
        t.add_column(c, justify="right")
    for rank, row in s.ranks.iterrows():
        t.add_row(str(rank), str(int(row["calls"])), _fmt_time(row["time"]), f"{row['vs_mean']:.2f}",
                  _fmt_bytes(row["bytes"]))
    console.print(t)


def _category(op: str) -> str:
    if op in ("dataset_write", "attr_write"):
        return "write"
    if op in ("dataset_read", "attr_read"):
        return "read"
    if op.startswith("file_"):
        return "file"
    return "metadata"


COLORS = {"write": "tab:red", "read": "tab:blue", "file": "tab:green", "metadata": "tab:gray"}


def timeline(df: pd.DataFrame, path: Path) -> Path:
    """Draw one row per rank, one bar per call, coloured by kind (write, read, file, metadata)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    ranks = sorted(df["rank"].unique())
    fig, ax = plt.subplots(figsize=(10, 1.0 + 0.5 * len(ranks)))
    cats = df["op"].map(_category)
    for i, rank in enumerate(ranks):
        for cat, color in COLORS.items():
            sel = df[(df["rank"] == rank) & (cats == cat)]
            if len(sel):
                # a bar at least a pixel wide: metadata calls last microseconds
                width = sel["dur"].clip(lower=1e-6)
                ax.broken_barh(list(zip(sel["t0"], width)), (i - 0.4, 0.8), facecolors=color)
    ax.set_yticks(range(len(ranks)), [str(r) for r in ranks])
    ax.set_xlabel("time since the first call [s]")
    ax.set_ylabel("rank")
    ax.legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items()], loc="upper left",
              bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
