"""Findings as text (rich), JSON, and a standalone HTML page with plots."""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd

from h5flow.advise.base import Finding, human_bytes

SEVERITY_STYLE = {"HIGH": "bold red", "WARN": "yellow", "INFO": "cyan"}


def to_json(findings: list[Finding], source: str, extra: dict[str, Any] | None = None) -> str:
    return json.dumps({"source": source, "findings": [f.to_dict() for f in findings], **(extra or {})}, indent=2)


def print_text(findings: list[Finding], source: str, console: Any = None) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.syntax import Syntax
    from rich.table import Table
    from rich.text import Text

    console = console or Console(width=max(Console().width, 120))
    if not findings:
        console.print(Text.assemble(("no finding", "green"), f" in {source}: none of the rules' thresholds was reached"))
        return
    table = Table(title=Text(f"h5flow advise: {len(findings)} finding(s) in {source}, costliest first"))
    for col in ("#", "severity", "rule", "file", "time (s)", "calls", "bytes"):
        table.add_column(col, justify="right" if col in ("#", "time (s)", "calls", "bytes") else "left")
    for i, f in enumerate(findings, 1):
        table.add_row(str(i), Text(f.severity, style=SEVERITY_STYLE[f.severity]), f.rule, Text(f.file),
                      f"{f.time_s:.3f}", f"{f.evidence.calls:,}", human_bytes(f.evidence.bytes))
    console.print(table)
    for i, f in enumerate(findings, 1):
        ev = f.evidence
        body = (f"{f.message}\n\nevidence: {ev.calls:,} calls, {ev.seconds:.3f} s, {human_bytes(ev.bytes)}, ranks "
                f"{_ranks(ev.ranks)}" + (f", objects {', '.join(ev.objects)}" if ev.objects else "") +
                f"\nsource: {f.source}")
        console.print(Panel(Text(body), title=f"{i}. [{SEVERITY_STYLE[f.severity]}]{f.severity}[/] {f.rule}: {f.title}",
                            subtitle=Text(f.file), expand=True))
        console.print("  fix (h5py):")
        console.print(Syntax(f.fix_h5py, "python", theme="ansi_dark", padding=(0, 4), word_wrap=True))
        console.print("  fix (C):")
        console.print(Syntax(f.fix_c, "c", theme="ansi_dark", padding=(0, 4), word_wrap=True))


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks)) if len(ranks) <= 8 else f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return base64.b64encode(buf.getvalue()).decode()


def plots(df: pd.DataFrame, findings: list[Finding]) -> list[tuple[str, str]]:
    """(caption, base64 PNG): time per finding, and a per-rank timeline with each finding's files marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    if findings:
        fig, ax = plt.subplots(figsize=(8, 0.5 + 0.4 * len(findings)))
        labels = [f"{f.rule} ({Path(f.file).name})" for f in findings][::-1]
        colors = ["tab:red" if f.severity == "HIGH" else "tab:orange" for f in findings][::-1]
        ax.barh(labels, [f.time_s for f in findings][::-1], color=colors)
        ax.set_xlabel("seconds in the calls of the finding")
        fig.tight_layout()
        out.append(("Time each finding's calls took", _png(fig)))
        plt.close(fig)
    if len(df):
        fig, ax = plt.subplots(figsize=(10, 1 + 0.5 * df["rank"].nunique()))
        kinds = df["op"].str.split("_").str[0]
        palette = dict(zip(sorted(kinds.unique()), plt.get_cmap("tab10").colors))
        for kind, g in df.groupby(kinds):
            ax.scatter(g["t0"], g["rank"], s=4 + 40 * (g["dur"] / max(df["dur"].max(), 1e-9)), label=kind,
                       color=palette[kind], alpha=0.6)
        flagged = df[df["file"].isin({f.file for f in findings})]
        if len(flagged):
            ax.scatter(flagged["t0"], flagged["rank"] + 0.25, marker="|", color="black", s=30,
                       label="file with a finding")
        ax.set_xlabel("seconds since the first call")
        ax.set_ylabel("rank")
        ax.set_yticks(sorted(int(r) for r in df["rank"].unique()))
        ax.legend(fontsize=7, ncol=4, loc="upper right")
        fig.tight_layout()
        out.append(("Calls per rank over time (marker size: duration)", _png(fig)))
        plt.close(fig)
    return out


def to_html(findings: list[Finding], source: str, df: pd.DataFrame) -> str:
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>h5flow advise: {e(source)}</title>",
             "<style>body{font-family:sans-serif;max-width:70em;margin:auto}pre{background:#f4f4f4;padding:.5em;"
             "overflow-x:auto}.HIGH{color:#b00}.WARN{color:#a60}.INFO{color:#068}td,th{padding:.2em .6em}"
             "</style></head><body>", f"<h1>h5flow advise</h1><p>{e(source)}: {len(findings)} finding(s), "
             "costliest first.</p>"]
    if findings:
        parts.append("<table><tr><th>#</th><th>severity</th><th>rule</th><th>file</th><th>time (s)</th>"
                     "<th>calls</th><th>bytes</th></tr>")
        for i, f in enumerate(findings, 1):
            parts.append(f"<tr><td>{i}</td><td class='{f.severity}'>{f.severity}</td><td>{e(f.rule)}</td>"
                         f"<td>{e(f.file)}</td><td>{f.time_s:.3f}</td><td>{f.evidence.calls:,}</td>"
                         f"<td>{human_bytes(f.evidence.bytes)}</td></tr>")
        parts.append("</table>")
    for caption, png in plots(df, findings):
        parts.append(f"<figure><img src='data:image/png;base64,{png}' alt='{e(caption)}'>"
                     f"<figcaption>{e(caption)}</figcaption></figure>")
    for i, f in enumerate(findings, 1):
        parts.append(f"<h2>{i}. <span class='{f.severity}'>{f.severity}</span> {e(f.rule)}: {e(f.title)}</h2>"
                     f"<p><b>{e(f.file)}</b>: {e(f.message)}</p><p>source: {e(f.source)}</p>"
                     f"<h3>fix (h5py)</h3><pre>{e(f.fix_h5py)}</pre><h3>fix (C)</h3><pre>{e(f.fix_c)}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)
