"""docs/tour.ipynb runs top to bottom, as a reader would run it (nbclient, a fresh kernel)."""

import os
import time

import pytest

from conftest import ROOT

TOUR = os.path.join(ROOT, "docs", "tour.ipynb")


def test_the_tour_is_stored_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(TOUR, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.notebook
def test_the_tour_runs_top_to_bottom(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(TOUR, as_version=4)
    start = time.monotonic()
    nbclient.NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    seconds = time.monotonic() - start
    if os.environ.get("TOUR_EXECUTED"):  # the notebook with its outputs, to read
        nbformat.write(notebook, os.environ["TOUR_EXECUTED"])
    text = "\n".join(
        output.get("text", "") for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs
    )
    assert "PE(pos + 7) = M_7 PE(pos) for every pos" in text
    assert "steps through the cache = one pass over the whole target" in text
    assert "beam 4: BLEU" in text and "updates in" in text
    print(f"docs/tour.ipynb ran in {seconds:.0f} s")
