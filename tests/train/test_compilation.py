"""The persistent compilation cache of a run and the compile meter: programs come back
from the cache instead of compiling, a directory that cannot be written costs one
warning line, a garbled entry is compiled again and replaced, and the settings in force
before are restored."""

import itertools
import os
import zlib

import jax
import jax.numpy as jnp
import pytest

from ebm_jax.train import compilation
from ebm_jax.train.compilation import CompileMeter, cache_dir, persistent_cache

_FRESH = itertools.count()


def _new_program():
    """A jitted function no earlier test compiled (its constant differs)."""
    c = float(next(_FRESH)) + 0.5 + os.getpid() % 97

    @jax.jit
    def f(x):
        return jnp.tanh(x * c) + c

    return f


def _settings():
    return {name: getattr(jax.config, name) for name in compilation._SETTINGS}


def _entries(path):
    return sorted(p for p in path.iterdir() if p.name.endswith("-cache"))


def test_meter_counts_compilations_and_their_seconds():
    f = _new_program()
    x = jnp.ones(3)
    with CompileMeter() as outer:
        with CompileMeter() as first:
            f(x).block_until_ready()
        with CompileMeter() as again:
            f(x).block_until_ready()
    assert first.compilations == 1 and first.cache_hits == 0
    assert 0 < first.seconds <= first.wall
    assert again.compilations == 0 and again.seconds == 0
    assert outer.compilations == 1  # meters nest; each sees what happened inside it
    assert outer.seconds == pytest.approx(first.seconds)


def test_union_of_spans_counts_nested_time_once():
    spans = [(0.0, 4.0), (1.0, 2.0), (3.0, 5.0), (7.0, 8.0)]
    assert compilation._union_seconds(spans) == pytest.approx(6.0)
    assert compilation._union_seconds([]) == 0.0


def test_cache_dir_of_a_run(tmp_path, monkeypatch):
    monkeypatch.delenv(compilation.ENV, raising=False)
    assert cache_dir(tmp_path / "w") == str(tmp_path / "w" / ".jax-cache")
    assert cache_dir(tmp_path / "w", "none") is None
    assert cache_dir(tmp_path / "w", "NONE") is None
    assert cache_dir(tmp_path / "w", str(tmp_path / "c")) == str(tmp_path / "c")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir("gs://bucket/run") == str(tmp_path / "xdg" / "ebm_jax" / "jax-cache")
    monkeypatch.setenv(compilation.ENV, str(tmp_path / "env"))
    assert cache_dir(tmp_path / "w") == str(tmp_path / "env")
    assert cache_dir(tmp_path / "w", "none") is None  # the option wins


def test_programs_come_back_from_the_cache(tmp_path):
    before = _settings()
    f, x = _new_program(), jnp.arange(4.0)
    lines = []
    with persistent_cache(tmp_path / "c", log=lines.append) as used:
        assert used == str(tmp_path / "c")
        with CompileMeter() as first:
            want = f(x)
        assert first.compilations == 1 and _entries(tmp_path / "c")
        jax.clear_caches()  # as a new process: nothing compiled in memory
        with CompileMeter() as second:
            got = f(x)
    assert second.compilations == 0 and second.cache_hits == 1
    assert jnp.array_equal(got, want) and lines == []
    assert _settings() == before  # restored on leaving


def test_no_cache_is_no_cache_even_where_jax_was_given_one(tmp_path):
    before = _settings()
    # what $JAX_COMPILATION_CACHE_DIR sets when JAX starts
    jax.config.update("jax_compilation_cache_dir", str(tmp_path / "jax"))
    try:
        with persistent_cache(None) as used:
            assert used is None
            f, x = _new_program(), jnp.ones(2)
            with CompileMeter() as meter:
                f(x)
            assert meter.compilations == 1 and meter.cache_hits == 0
        assert not (tmp_path / "jax").exists()
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "jax")
    finally:
        jax.config.update("jax_compilation_cache_dir", before["jax_compilation_cache_dir"])
        compilation._jax_cache_module().reset_cache()


@pytest.mark.parametrize("where", ["under_a_file", "proc"])
def test_an_unwritable_cache_is_one_warning_and_the_run_goes_on(tmp_path, where):
    (tmp_path / "file").write_text("not a directory")
    path = {"under_a_file": tmp_path / "file" / "cache",
            "proc": "/proc/ebm-jax-no-cache-here"}[where]  # not writable, even by root
    before, lines = _settings(), []
    with persistent_cache(path, log=lines.append):
        for _ in range(3):
            f = _new_program()
            with CompileMeter() as meter:
                assert float(f(jnp.zeros(()))) > 0
            assert meter.compilations >= 1 and meter.cache_hits == 0
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"warning: compilation cache {path} cannot be written")
    assert "running without it" in lines[0]
    assert _settings() == before


def test_a_garbled_entry_is_compiled_again_and_replaced(tmp_path):
    f, x = _new_program(), jnp.arange(3.0)
    lines = []
    with persistent_cache(tmp_path / "c", log=lines.append):
        want = f(x)
        (entry,) = _entries(tmp_path / "c")
        good = entry.read_bytes()
        entry.write_bytes(good[: len(good) // 2])  # cut short
        jax.clear_caches()
        with CompileMeter() as meter:
            got = f(x)
        assert meter.compilations == 1 and jnp.array_equal(got, want)
        assert len(lines) == 1 and "cannot be read" in lines[0] and entry.name in lines[0]
        zlib.decompress(entry.read_bytes())  # replaced by a readable entry
        jax.clear_caches()
        with CompileMeter() as meter:
            f(x)
        assert meter.compilations == 0 and meter.cache_hits == 1 and len(lines) == 1
