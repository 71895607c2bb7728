"""The Colab notebooks: each .py source runs top to bottom at the smallest sizes, and its
paired .ipynb holds the same cells (checked without jupytext, which is not a
dependency: the percent format is parsed here)."""

import json
import math
import runpy
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"

# the smallest sizes of notebooks/socl_top_maps.py (seconds on 2 CPU cores)
SOCL_TINY = {"SOCL_NB_TRAIN_SEQUENCES": "3", "SOCL_NB_FRAMES": "6",
             "SOCL_NB_TEST_FRAMES": "5", "SOCL_NB_HEIGHT": "96", "SOCL_NB_WIDTH_PX": "128",
             "SOCL_NB_NUM_RANDOM": "300", "SOCL_NB_EDGEBOXES": "50", "SOCL_NB_VIDEOS": "2",
             "SOCL_NB_STEPS": "3", "SOCL_NB_INPUT_SIZE": "111",
             "SOCL_NB_CONTEXT_SIDE": "64"}


def percent_cells(source: str) -> list[tuple[str, str]]:
    """(cell type, source) of each cell of a jupytext percent-format script, as
    jupytext writes them into the .ipynb: the YAML header dropped, `# %%` lines split
    cells, blank lines around a cell dropped, markdown lines without their `# `."""
    lines = source.splitlines()
    if lines and lines[0] == "# ---":
        lines = lines[lines.index("# ---", 1) + 1:]
    cells: list[tuple[str, list[str]]] = []
    for line in lines:
        if line.startswith("# %%"):
            cells.append(("markdown" if "[markdown]" in line else "code", []))
        elif cells:
            cells[-1][1].append(line)
        else:
            assert not line.strip(), f"text before the first cell: {line!r}"
    out = []
    for kind, body in cells:
        text = "\n".join(body).strip("\n")
        if kind == "markdown":
            text = "\n".join("" if line == "#" else line.removeprefix("# ")
                             for line in text.splitlines())
        out.append((kind, text))
    return out


@pytest.mark.parametrize("name", ["socl_top_maps"])
def test_ipynb_is_in_sync_with_the_py(name):
    script = NOTEBOOKS / f"{name}.py"
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    cells = [(c["cell_type"], "".join(c["source"])) for c in notebook["cells"]]
    expected = percent_cells(script.read_text())
    assert len(cells) == len(expected), "cells added or removed: rerun jupytext --sync"
    for i, (got, want) in enumerate(zip(cells, expected)):
        assert got == want, f"cell {i} differs from {script.name}: rerun jupytext --sync"
    assert notebook["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
    for c in notebook["cells"]:  # kept clean: no outputs committed
        if c["cell_type"] == "code":
            assert c["outputs"] == [] and c["execution_count"] is None


def test_percent_cells_parses_jupytext_layout():
    text = ("# ---\n# jupyter:\n#   x: 1\n# ---\n\n# %% [markdown]\n# # Title\n#\n# text\n\n"
            "# %%\nimport os\n\nx = 1\n\n\n# %%\n# a comment\ny = 2\n")
    assert percent_cells(text) == [("markdown", "# Title\n\ntext"),
                                   ("code", "import os\n\nx = 1"),
                                   ("code", "# a comment\ny = 2")]


def test_socl_notebook_runs(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    for key, value in SOCL_TINY.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SOCL_NB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    try:
        ns = runpy.run_path(str(NOTEBOOKS / "socl_top_maps.py"), run_name="__main__")
    finally:
        plt.close("all")
    losses = ns["losses"]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert int(ns["metrics"]["num_negatives"]) == 8 * 2 - 2
    assert set(ns["results"]) == {"SoCL-Siam", "random backbone"}
    assert all(len(boxes) == 5 for boxes in ns["results"].values())
