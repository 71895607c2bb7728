"""The notebooks' install cell (the first code cell, the same in each): where ebm_jax is
not importable, it installs it from REPO with pip held to the installed jax and jaxlib,
so that a Colab runtime's accelerator build of JAX stays; it says what to do when REPO
is unset or pip fails. Run in a fresh Python where `import ebm_jax` fails until the
(stubbed) pip has run."""

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).parents[2] / "notebooks"

# Python run before the cell: ebm_jax hidden until the stubbed pip "installs" it, and
# subprocess.run recording pip's command and its constraint file.
PRELUDE = """
import importlib.abc, json, subprocess, sys

class Hidden(importlib.abc.MetaPathFinder):
    installed = False

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "ebm_jax" and not self.installed:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None

hidden = Hidden()
sys.meta_path.insert(0, hidden)
calls = []

def fake_run(args, **kwargs):
    source = args[args.index("-c") + 1]  # pip reads the constraints from there
    constraints = kwargs["input"] if source == "/dev/stdin" else open(source).read()
    calls.append({"args": args, "constraints": constraints})
    hidden.installed = PIP_CODE == 0
    return subprocess.CompletedProcess(args, PIP_CODE)

subprocess.run = fake_run
"""
EPILOGUE = "\nprint('CALLS ' + json.dumps(calls))\n"


def _cell() -> str:
    # the detection notebook installs an extra (its EXTRAS: "[coco]")
    notebook = json.loads((NOTEBOOKS / "detection_refinement.ipynb").read_text())
    return next("".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code")


def _run(repo: str, pip_code: int = 0) -> subprocess.CompletedProcess:
    code = f"PIP_CODE = {pip_code}\n" + PRELUDE + _cell() + EPILOGUE
    env = {"PATH": "/usr/bin:/bin", "EBM_JAX_REPO": repo}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)


def _calls(done: subprocess.CompletedProcess) -> list[dict]:
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("CALLS "))
    return json.loads(line.removeprefix("CALLS "))


@pytest.mark.parametrize("repo, target", [
    ("https://example.org/ebm_jax.git", "ebm_jax[coco] @ git+https://example.org/ebm_jax.git"),
    ("ssh://git@example.org/ebm_jax.git", "ebm_jax[coco] @ git+ssh://git@example.org/ebm_jax.git"),
    ("/content/ebm_jax", "/content/ebm_jax[coco]"),
])
def test_installs_from_repo_keeping_the_installed_jax(repo, target):
    (call,) = _calls(_run(repo))
    args = call["args"]
    assert args[:5] == [sys.executable, "-m", "pip", "install", "-q"] and target in args
    assert "-U" not in args and "--upgrade" not in args
    pins = set(call["constraints"].split())
    assert pins == {f"jax=={importlib.metadata.version('jax')}",
                    f"jaxlib=={importlib.metadata.version('jaxlib')}"}


def test_without_repo_it_says_where_to_set_it():
    done = _run("")
    assert done.returncode != 0 and "set REPO above" in done.stderr


def test_a_failed_install_names_the_kept_jax():
    done = _run("https://example.org/ebm_jax.git", pip_code=1)
    assert done.returncode != 0
    assert f"jax=={importlib.metadata.version('jax')}" in done.stderr
    assert "needs jax >= 0.11" in done.stderr
