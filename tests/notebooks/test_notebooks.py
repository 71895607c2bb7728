"""The Colab notebooks: every `notebooks/*.py` (jupytext percent format, the source) has
an `.ipynb` twin with the same cells and no outputs, and `make test` executes each
`.ipynb` top to bottom in a fresh Jupyter kernel (nbclient, as nbmake does) at its
`tiny` size, with a per-cell timeout, then checks what it computed in one more cell.
Each notebook starts with the same install cell and reads one size variable."""

import ast
import json
import re
from pathlib import Path

import pytest

from ebm_jax.checks import EXTRAS

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"
NAMES = sorted(p.stem for p in NOTEBOOKS.glob("*.py"))
CELL_TIMEOUT_S = 300

# Environment of the executed notebooks. Each reads one size preset,
# EBM_JAX_NOTEBOOK_SIZE ("tiny" here, "default" on 2 CPU cores, "large" on a Colab
# accelerator), and no other variable but EBM_JAX_REPO (the install cell's).

# a minute or more on 2 CPU cores: in `make test-heavy` (and CI), not `make test`
pytestmark = pytest.mark.heavy
ENV = {"EBM_JAX_NOTEBOOK_SIZE": "tiny", "MPLBACKEND": "Agg"}
NOTEBOOK_VARIABLES = {"EBM_JAX_NOTEBOOK_SIZE", "EBM_JAX_REPO"}

# What each notebook must have computed: expressions evaluated in its kernel after the
# last cell, each of which must be True.
CHECKS = {
    "detection_refinement": [
        "set(ap_before) == set(ap_after) == {'AP', 'AP50', 'AP75'} and all(0.0 <= v <= 1.0"
        " for d in (ap_detector, ap_before, ap_after) for v in d.values())",
        "len(per_image) == NUM_TEST == 4 and all(p[k].ndim == 2 and p[k].shape[1] == 4"
        " for p in per_image for k in ('gt', 'initial', 'nms', 'refined'))",
        "sum(len(p['refined']) for p in per_image) == len(results['refined']) > 0"
        " and all(np.all(p['refined'][:, 2:] > p['refined'][:, :2]) for p in per_image)",
        "len(iou_before) == len(iou_after) > 0"
        " and bool(np.all((iou_after >= 0) & (iou_after <= 1)))",
        "head_figures.steps == 2 and len(head_losses) >= 1"
        " and all(math.isfinite(v) for v in head_losses)",
    ],
    "ebm_box_head": [
        "trained.figures.steps == settings.steps == 3 and len(losses) >= 1"
        " and all(math.isfinite(v) for v in losses)",
        "set(results) == set(iou) == {'coarse', 'refined'} and all(b.shape == (4,)"
        " for b in results.values()) and all(0.0 <= v <= 1.0 for v in iou.values())",
        "bool(np.all(np.isfinite(refined_box))) and refined_box[2] > 0"
        " and refined_box[3] > 0",
    ],
    "ebm_regression_1d": [
        "set(loss_values) == {'ml-is', 'kld-is', 'ml-mcmc-16', 'nce', 'sm', 'dsm', 'nce+'}"
        " and all(math.isfinite(v) for v in loss_values.values())",
        "len(grad_norms) == 7 and all(math.isfinite(g) and g > 0"
        " for g in grad_norms.values())",
        "set(kl) == {(m, d) for m in ('ml-is', 'nce+') for d in (1, 2)}"
        " and all(0 < v < 10 for v in kl.values())",
        "all(len(v) == NUM_MODELS for v in kl_all.values()) and all(len(h) == EPOCHS"
        " and all(math.isfinite(x) for x in h) for h in history.values())",
        "len(densities) == 4 and all(p.shape == (PLOT_GRID, PLOT_GRID)"
        " and np.allclose(p.sum(axis=1), 1, atol=1e-3) for p in densities.values())",
    ],
    "jitted_losses": [
        "set(timings) == {(n, m, k) for n in LOSSES for m in M_LIST for k in K_LIST}"
        " and all(t['compile'] > 0 and t['steady'] > 0 for t in timings.values())",
        "set(values) == set(timings) and all(math.isfinite(v) for v in values.values())",
        "abs(float(one) - float(direct)) < 1e-5 and abs(float(batch_value)"
        " - float(per_example.mean())) < 1e-5 and per_example.shape == (BATCH,)"
        " and math.isfinite(grad_norm) and grad_norm > 0",
        "sm_error < 1e-5 and abs(float(trace) + float(jnp.trace(A))) < 1e-4",
        "abs(math.log(sweep_argmin['sm'] * var)) < 0.06 and abs(math.log("
        "sweep_argmin['nce+'] / expected['nce+'])) < 0.2"
        " and sweep_argmin['dsm'] < 0.3 * sweep_argmin['sm']",
    ],
    "moco": [
        "len(losses) == num_steps == 8 and all(math.isfinite(v) for v in losses)",
        "abs(by_hand - losses[0]) < 1e-3",
        "set(results) == {'MoCo', 'random', 'pixels'} and all(0.0 <= r[s] <= 1.0"
        " for r in results.values() for s in ('knn', 'linear'))",
        "embedding.shape == (100, 2) and bool(np.isfinite(embedding).all())",
        "0.0 < lag < 0.5 and int(trained.pointer[...]) == (num_steps * BATCH) % QUEUE",
    ],
    "socl_top_maps": [
        "len(losses) == 3 and all(math.isfinite(v) for v in losses)",
        "int(metrics['num_negatives']) == 8 * 2 - 2",
        "set(results) == {'SoCL-Siam', 'random backbone'}",
        "all(len(boxes) == 5 for boxes in results.values())",
    ],
}


# The extras each notebook installs beyond the core (its install cell's EXTRAS); the
# run below hides the modules of every other extra (`ebm_jax.checks.EXTRAS`).
NOTEBOOK_EXTRAS = {"detection_refinement": ("coco",), "ebm_box_head": ("data",)}


def hide_extras(name: str) -> str:
    """A cell, run first in the notebook's kernel: the modules of the extras that
    notebook `name` does not install cannot be imported."""
    hidden = sorted(m for extra, mods in EXTRAS.items()
                    if extra not in NOTEBOOK_EXTRAS.get(name, ()) for m in mods)
    return HIDE_EXTRAS.replace("HIDDEN_MODULES", repr(hidden))


HIDE_EXTRAS = """
import importlib.abc as _abc, sys as _sys
_HIDDEN = HIDDEN_MODULES
class _Hidden(_abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden)", name=name)
_sys.meta_path.insert(0, _Hidden())
"""


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


def test_every_notebook_is_checked():
    assert NAMES, "no notebooks found"
    assert sorted(CHECKS) == NAMES, "each notebook needs its entry in CHECKS"


@pytest.mark.parametrize("name", NAMES)
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


def test_one_size_variable_drives_each_notebook():
    for name in NAMES:
        source = (NOTEBOOKS / f"{name}.py").read_text()
        read = set(re.findall(r"os\.environ(?:\.get\(|\[)\s*[\"'](\w+)", source))
        assert read == NOTEBOOK_VARIABLES, f"{name} reads {sorted(read)}"
        # a Colab form (a drop-down of the three sizes) that the variable overrides
        assert ('SIZE = "default"  # @param ["tiny", "default", "large"]\n'
                'SIZE = os.environ.get("EBM_JAX_NOTEBOOK_SIZE", SIZE)') in source, name
        meta = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())["metadata"]
        assert meta["accelerator"] == "GPU", name  # Colab opens it on a GPU runtime
        sizes = next(node.value for node in ast.walk(ast.parse(source))
                     if isinstance(node, ast.Assign) and len(node.targets) == 1
                     and getattr(node.targets[0], "id", None) == "SIZES")
        assert {k.value for k in sizes.keys} == {"tiny", "default", "large"}, name
        shapes = {tuple(sorted(k.arg for k in v.keywords)) for v in sizes.values}
        assert len(shapes) == 1, f"{name}: the sizes set different variables"


def install_cell(name: str) -> str:
    """The first code cell of a notebook's .ipynb."""
    notebook = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text())
    return next("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")


def test_every_notebook_starts_with_the_same_install_cell():
    """The same cell but for its EXTRAS line, which names the notebook's extras."""
    cells = {name: install_cell(name) for name in NAMES}
    extras_line = re.compile(r'^EXTRAS = "(\[([a-z,]+)\])?"  # .*$', re.M)
    for name, cell in cells.items():
        found = extras_line.search(cell)
        assert found, f"{name}: no EXTRAS line"
        assert tuple(filter(None, (found.group(2) or "").split(","))) == NOTEBOOK_EXTRAS.get(
            name, ()), name
    assert len({extras_line.sub("", c) for c in cells.values()}) == 1, "the cells differ"
    assert 'REPO = os.environ.get("EBM_JAX_REPO", "")' in cells[NAMES[0]]


def test_percent_cells_parses_jupytext_layout():
    text = ("# ---\n# jupyter:\n#   x: 1\n# ---\n\n# %% [markdown]\n# # Title\n#\n# text\n\n"
            "# %%\nimport os\n\nx = 1\n\n\n# %%\n# a comment\ny = 2\n")
    assert percent_cells(text) == [("markdown", "# Title\n\ntext"),
                                   ("code", "import os\n\nx = 1"),
                                   ("code", "# a comment\ny = 2")]


@pytest.mark.parametrize("name", NAMES)
def test_notebook_runs(name, tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    # the kernel sees exactly one CPU device, as a Colab user would
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the notebooks' temporary folders
    notebook = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    # the notebooks need the core install only: the extras' modules are hidden
    notebook.cells.insert(0, nbformat.v4.new_code_cell(hide_extras(name)))
    checks = CHECKS.get(name, ["True"])  # test_every_notebook_is_checked wants an entry
    notebook.cells.append(nbformat.v4.new_code_cell(
        "import json as _json, math\n"
        f"print('CHECKS ' + _json.dumps([bool({' ), bool('.join(checks)})]))"))
    client = nbclient.NotebookClient(notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "".join(o.get("text", "") for o in notebook.cells[-1].outputs)
    line = next(x for x in text.splitlines() if x.startswith("CHECKS "))
    results = json.loads(line.removeprefix("CHECKS "))
    failed = [c for c, ok in zip(checks, results) if not ok]
    assert not failed, f"{name}: {failed}"
