"""The documentation: the README is a short user guide whose two commands come first and
whose Python examples run as shown (at tiny size); the docs site builds with mkdocs in
strict mode (a broken link or anchor fails); no internal label reaches user-facing text;
the LICENSE is the one pyproject names."""

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


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, re.S)


def test_the_readme_is_short_and_starts_with_its_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    first = text.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    assert [line.split()[:2] for line in first] == [["make", "run"], ["make", "test"]]
    for page in re.findall(r"\]\((docs/[\w/]+\.md)", text):
        assert (ROOT / page).is_file(), page


def test_the_readme_examples_run_as_shown(tmp_path):
    blocks = _python_blocks(README.read_text())
    assert len(blocks) == 2
    quick = subprocess.run([sys.executable, "-c", blocks[0]], capture_output=True,
                           text=True, cwd=ROOT, timeout=300)
    assert quick.returncode == 0, quick.stderr
    # the output the README states beside the example
    assert quick.stdout.split() == ["fit", "4.4", "misfit", "8.79"]
    run = blocks[1].replace("/tmp/ebm-demo", str(tmp_path))
    done = subprocess.run([sys.executable, "-c", run], capture_output=True, text=True,
                          cwd=ROOT, timeout=600, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "results.json").is_file()


def test_the_docs_site_builds_strictly(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-d", str(tmp_path / "site")], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "ebm_box_head" / "index.html").is_file()


def test_no_internal_label_in_user_facing_text():
    files = [README, ROOT / "ebm_jax" / "cli.py", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "experiments").rglob("*.py"))]
    found = [f"{f.relative_to(ROOT)}: {m.group(0)}" for f in files
             for m in INTERNAL.finditer(f.read_text())]
    assert not found


def test_the_license_is_apache_2():
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert 'license = { text = "Apache-2.0" }' in (ROOT / "pyproject.toml").read_text()
