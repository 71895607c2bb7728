"""The documentation: the README is a short user guide whose two commands come first
(its examples, and the docs', run in tests/test_docs_examples.py); the docs site builds
with mkdocs in strict mode (a broken link or anchor fails), the notebooks among its
pages, with their figures when executed; no internal label and no remark about earlier
releases reaches user-facing text (those belong in CHANGELOG.md); the LICENSE is the one
pyproject names."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
# labels a user cannot know: numbered source files, issue numbers, "the issue's ..."
INTERNAL = re.compile(r"seed\s+00[0-9]|seeds?\s+000|issue\s?#?[0-9]+|the\s+issue.s", re.I)
# history on a user page: how things were in an earlier release goes to CHANGELOG.md
RELEASE = re.compile(r"(previous|earlier|last|older)\s+releases?|(before|since|in)\s+this"
                     r"\s+release|until\s+[0-9a-f]{7,40}\b", re.I)
# pages that still carry such remarks, and how many (this may only go down)
RELEASE_REMARKS_LEFT: dict[str, int] = {}
NOTEBOOKS = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))


def test_the_readme_is_short_and_starts_with_its_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first] == [["make", "run"], ["make", "test"]]
    for page in re.findall(r"\]\((docs/[\w/]+\.md)", text):
        assert (ROOT / page).is_file(), page


def _build_site(site: Path, timeout: int, **env: str) -> None:
    """`mkdocs build --strict` into `site`; `env` over this process's environment, less
    the variables that would change the notebooks' rendering."""
    drop = ("EBM_JAX_DOCS_EXECUTE", "MPLBACKEND", "XLA_FLAGS", "JAX_NUM_CPU_DEVICES")
    environ = {k: v for k, v in os.environ.items() if k not in drop}
    environ.update(NO_MKDOCS_2_WARNING="1", **env)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(site)], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=environ)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def test_the_docs_site_builds_strictly(tmp_path):
    _build_site(tmp_path / "site", timeout=300)
    assert (tmp_path / "site" / "ebm_box_head" / "index.html").is_file()
    for name in NOTEBOOKS:  # each notebook is a page, rendered by mkdocs-jupyter
        page = (tmp_path / "site" / "notebooks" / name / "index.html").read_text()
        assert "jp-Notebook" in page and "EBM_JAX_NOTEBOOK_SIZE" in page, name


@pytest.mark.slow
def test_the_docs_site_renders_the_executed_notebooks_with_their_figures(tmp_path):
    # each notebook runs in a kernel at the tiny size, its figures inline (no Agg)
    _build_site(tmp_path / "site", timeout=3000, EBM_JAX_DOCS_EXECUTE="true",
                EBM_JAX_NOTEBOOK_SIZE="tiny", JAX_PLATFORMS="cpu", TMPDIR=str(tmp_path))
    for name in NOTEBOOKS:
        page = (tmp_path / "site" / "notebooks" / name / "index.html").read_text()
        assert "data:image/png;base64" in page, f"{name}: no figure"
        assert "Traceback" not in page, name


def test_no_release_history_on_the_user_pages():
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        name = str(page.relative_to(ROOT))
        if name.startswith("docs/changelog"):  # history belongs there
            continue
        count = len(RELEASE.findall(" ".join(page.read_text().split())))
        assert count <= RELEASE_REMARKS_LEFT.get(name, 0), f"{name}: {count} remark(s)"


def test_no_internal_label_in_user_facing_text():
    files = [README, ROOT / "ebm_jax" / "cli.py", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "experiments").rglob("*.py"))]
    found = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files
             for m in INTERNAL.finditer(f.read_text())]
    assert not found


def test_the_license_is_apache_2():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
