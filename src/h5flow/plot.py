"""Plots of a run record: the paper's Fig. 3 (memory over time) and Fig. 4 (per-step progress)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIB = 1 << 20


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def fig3_memory(record: dict[str, Any], path: Path) -> Path:
    """RSS over time of every producer rank (left) and consumer rank (right)."""
    plt = _plt()
    t0 = record["launched"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, role in zip(axes, ("producer", "consumer"), strict=True):
        for r in record[role]["ranks"]:
            ts = [s[0] - t0 for s in r["rss"]]
            ax.plot(ts, [s[1] / MIB for s in r["rss"]], lw=1.2, label=f"rank {r['rank']}")
        n = record["producers"] if role == "producer" else record["consumers"]
        ax.set_title(f"{role}s ({n} ranks)")
        ax.set_xlabel("time since launch (s)")
        ax.grid(alpha=0.3)
        if len(record[role]["ranks"]) <= 8:
            ax.legend(fontsize=8)
    axes[0].set_ylabel("resident memory (MiB)")
    layout = f" ({record['layout']})" if record.get("layout") else ""  # hdf5's layout
    fig.suptitle(f"Memory over time — {record['transport']}{layout}, "
                 f"{record['producers']}:{record['consumers']}, {record['steps']} steps")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fig4_progress(record: dict[str, Any], path: Path) -> Path:
    """Per-step progress on rank 0: compute and publish on the producer, wait and analysis on the consumer."""
    plt = _plt()
    t0 = record["launched"]
    prod = next(r for r in record["producer"]["ranks"] if r["rank"] == 0)
    cons = next(r for r in record["consumer"]["ranks"] if r["rank"] == 0)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    for step, a, b in prod["compute"]:
        ax.barh(step, b - a, left=a - t0, height=0.35, color="tab:blue", align="edge")
    for e in prod["events"]:
        end = e.get("publish", e.get("admitted"))
        ax.barh(e["step"], end - e["end_step"], left=e["end_step"] - t0, height=0.35,
                color="tab:orange" if e.get("published", True) else "tab:red", align="edge")
    for e in cons["events"]:
        ax.barh(e["step"] - 0.4, e["released"] - e["visible"], left=e["visible"] - t0, height=0.35,
                color="tab:green", align="edge")
        ax.plot([e["published"] - t0], [e["step"] - 0.2], marker="|", color="k", ms=6)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="tab:blue", label="producer: compute"),
                       Patch(color="tab:orange", label="producer: write + publish"),
                       Patch(color="tab:green", label="consumer: read + analysis + release")], fontsize=8)
    ax.set_xlabel("time since launch (s)")
    ax.set_ylabel("step")
    ax.invert_yaxis()
    ax.grid(alpha=0.3, axis="x")
    ax.set_title(f"Per-step progress on rank 0 — {record['producers']}:{record['consumers']}, "
                 f"{record['transport']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_record(record_path: Path, out_dir: Path | None = None) -> list[Path]:
    record = json.loads(Path(record_path).read_text())
    for key in ("producer", "consumer", "launched"):
        if key not in record:
            raise ValueError(f"{record_path} is not an h5flow run record (no {key!r}); make one with "
                             "`h5flow run CONFIG --json OUT`")
    out = out_dir or Path(record_path).parent
    out.mkdir(parents=True, exist_ok=True)
    stem = Path(record_path).stem
    return [fig3_memory(record, out / f"{stem}-fig3-memory.png"), fig4_progress(record, out / f"{stem}-fig4-progress.png")]
