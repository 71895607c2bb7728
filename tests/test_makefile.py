"""The Makefile's bootstrap: a .venv of the wrong Python is rebuilt, and a PYTHON that
is too old is refused with the error last (no installer noise after it)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def _fake_python(path: Path, version: str, major_minor: tuple[int, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = "0" if major_minor >= (3, 12) else "1"
    path.write_text(f'#!/bin/sh\n[ "$1" = --version ] && echo "Python {version}" && exit 0\n'
                    f"exit {ok}\n")
    path.chmod(0o755)


def test_a_venv_of_another_python_is_rebuilt(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path)
    _fake_python(tmp_path / ".venv" / "bin" / "python", "3.11.7", (3, 11))
    out = subprocess.run(["make", "-s", "check-venv"], cwd=tmp_path, text=True,
                         capture_output=True, check=True).stdout
    assert "holds Python 3.11.7, not >= 3.12: rebuilding it" in out
    assert not (tmp_path / ".venv").exists()
    # a good one is left alone
    _fake_python(tmp_path / ".venv" / "bin" / "python", "3.12.1", (3, 12))
    out = subprocess.run(["make", "-s", "check-venv"], cwd=tmp_path, text=True,
                         capture_output=True, check=True).stdout
    assert out == "" and (tmp_path / ".venv").exists()


def test_an_old_python_is_refused_with_the_error_last(tmp_path):
    shutil.copy(ROOT / "Makefile", tmp_path)
    (tmp_path / "pyproject.toml").write_text("")
    _fake_python(tmp_path / "py311", "3.11.7", (3, 11))
    r = subprocess.run(["make", "-s", f"PYTHON={tmp_path / 'py311'}", ".venv/.installed"],
                       cwd=tmp_path, text=True, capture_output=True)
    assert r.returncode != 0
    last = (r.stdout + r.stderr).strip().splitlines()
    assert any("is Python 3.11.7, but ebm_jax needs Python >= 3.12" in ln for ln in last[-2:])
    assert not (tmp_path / ".venv").exists()
