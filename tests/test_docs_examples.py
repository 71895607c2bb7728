"""Every code example of the README and of docs/*.md runs as shown.

Each fenced ```python block runs in a fresh Python process, in an empty working
directory that holds only a link to the repository's `experiments/` (so a config path
such as `experiments/ebm_regression/table1_toy1d.py:tiny` reads as it does from the
repository's root, and whatever a block writes stays in the test's directory). Each
`ebm-jax run ...:tiny` command of a ```bash block runs the same way (absolute `/tmp/...`
paths are moved into the test's directory); a block whose every `ebm-jax` command is a
`:tiny` one runs whole, as a script (loops and `wait` included).

A block that cannot run as shown (it needs a file that is not in the repository, such
as a real dataset or downloaded weights) says so right before its fence, with
`<!-- not-run: why -->`; it must be listed in NOT_RUN below and must still compile.
Experiments run through Python outside the README, and every shell command, are marked
slow (`make test-slow`); the README's experiment runs in `make test-heavy` (and CI), the
other blocks in `make test`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
MARKER = re.compile(r"<!--\s*not-run:\s*(.*?)\s*-->\s*\Z", re.S)

# (page, reason) of every block marked `<!-- not-run: reason -->`
NOT_RUN = {
    ("docs/library.md", "needs torchvision's resnet18-f37072fd.pth"),
}


@dataclass(frozen=True)
class Block:
    page: str  # path relative to the repository
    line: int  # line of the opening fence
    lang: str
    code: str
    not_run: str | None  # the reason given in its marker

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(lang: str | None = None) -> list[Block]:
    found = []
    for page in PAGES:
        text = page.read_text()
        for m in FENCE.finditer(text):
            before = text[:m.start()]
            marker = MARKER.search(before[-300:])
            found.append(Block(str(page.relative_to(ROOT)), before.count("\n") + 1,
                               m.group(1), m.group(2), marker and marker.group(1)))
    return [b for b in found if lang is None or b.lang == lang]


def logical_lines(code: str) -> list[str]:
    """Shell lines with their backslash continuations joined."""
    return code.replace("\\\n", " ").splitlines()


def tiny_commands(code: str) -> list[str]:
    """The `ebm-jax run ...:tiny` commands of a shell block: the whole block when every
    `ebm-jax` command in it is a tiny one, else those lines alone."""
    lines = [line for line in logical_lines(code) if "ebm-jax " in line]
    tiny = [line for line in lines if re.search(r"ebm-jax run \S+:tiny\b", line)]
    if tiny and len(tiny) == len(lines):
        return [code]
    return tiny


def _slow(block: Block) -> bool:
    return block.lang == "bash" or (block.page != "README.md"
                                    and "run_experiment(" in block.code)


PYTHON = [b for b in blocks("python") if b.not_run is None]
SHELL = [(b, c) for b in blocks("bash") if b.not_run is None
         for c in tiny_commands(b.code)]


def _params(items: list, blocks_of: list[Block]) -> list:
    return [pytest.param(item, id=f"{b.id}" + (f"#{i}" if b.lang == "bash" else ""),
                         marks=[pytest.mark.slow] if _slow(b) else
                         [pytest.mark.heavy] if "run_experiment(" in b.code else [])
            for i, (item, b) in enumerate(zip(items, blocks_of))]


@pytest.fixture
def workdir(tmp_path):
    """An empty directory with `experiments/` and `.venv` linked from the repository."""
    (tmp_path / "experiments").symlink_to(ROOT / "experiments")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def _env() -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"}
    env.pop("JAX_NUM_CPU_DEVICES", None)  # one CPU device, as a user has
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def _run(args: list[str], cwd: Path, timeout: int) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env=_env(),
                          timeout=timeout)
    assert done.returncode == 0, (f"{args[-1][:300]}\n{done.stdout[-2000:]}\n"
                                  f"{done.stderr[-4000:]}")
    return done


def test_the_pages_have_examples_and_the_collection_finds_them():
    assert len(PYTHON) >= 6 and any(b.page == "README.md" for b in PYTHON)
    assert any(b.page == "docs/cli.md" for b, _ in SHELL)
    text = "x\n<!-- not-run: needs a file -->\n```python\nimport os\n```\n"
    assert MARKER.search(text[:text.index("```")]).group(1) == "needs a file"
    assert tiny_commands("ebm-jax list\nebm-jax run a.py:tiny --out /tmp/o\n") == [
        "ebm-jax run a.py:tiny --out /tmp/o"]
    loop = "for i in 0 1; do\n  X=$i \\\n    ebm-jax run a.py:tiny &\ndone; wait\n"
    assert tiny_commands(loop) == [loop]


def test_every_block_that_does_not_run_is_marked_listed_and_compiles():
    marked = [b for b in blocks() if b.not_run is not None]
    assert {(b.page, b.not_run) for b in marked} == NOT_RUN
    for b in marked:
        assert b.lang == "python" and b.not_run, b.id
        compile(b.code, b.id, "exec")


@pytest.mark.parametrize("block", _params(PYTHON, PYTHON))
def test_python_example_runs(block, workdir):
    done = _run([sys.executable, "-c", block.code], workdir, timeout=900)
    if block.page == "README.md" and "make_loss(" in block.code:
        # the output the README states beside the example
        assert done.stdout.split() == ["fit", "4.4", "misfit", "8.79"]
    if "run_experiment(" in block.code:
        assert list(workdir.glob("results/*/results.json")), "no results.json written"


@pytest.mark.parametrize("script", _params([c for _, c in SHELL], [b for b, _ in SHELL]))
def test_tiny_shell_command_runs(script, workdir):
    script = re.sub(r"(?<![\w.])/tmp/", f"{workdir}/tmp/", script)
    # a bare `wait` returns 0 whatever its jobs returned: wait for each in turn
    script = re.sub(r"\bwait\b", 'for job in $(jobs -p); do wait "$job"; done', script)
    _run(["bash", "-euo", "pipefail", "-c", script], workdir, timeout=900)
