"""The notebooks of examples/notebooks run from top to bottom (nbclient), so that they never rot."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "examples" / "notebooks"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_trace_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(NOTEBOOKS / "trace_mpi.ipynb", as_version=4)
    monkeypatch.setenv("H5FLOW_NOTEBOOK_DIR", str(NOTEBOOKS))
    monkeypatch.setenv("H5FLOW_NOTEBOOK_WORK", str(tmp_path / "work"))
    monkeypatch.delenv("HDF5_VOL_CONNECTOR", raising=False)
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("dtype-conversion" in str(o.get("data", o.get("text", ""))) for o in outputs)
    assert (tmp_path / "work" / "trace" / "rank-3.trace").is_file() and (tmp_path / "work" / "timeline.png").is_file()
