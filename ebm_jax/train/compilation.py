"""Compilation: JAX's persistent compilation cache for a run, and what compiling cost.

    with persistent_cache(cache_dir("runs/regression1d")):   # <workdir>/.jax-cache
        with CompileMeter() as meter:
            ...                                               # trains, evaluates
        meter.seconds, meter.compilations, meter.cache_hits

- `persistent_cache(path)` keeps every executable XLA builds in `path` (whatever its
  size or compile time, so the small programs of a CPU run too) and loads it from there
  in a later process: a rerun, a resumed run or a second work directory with the same
  cache compiles nothing twice. A directory that cannot be created or written (a
  read-only filesystem, a path through a file) gives one warning line and the run goes
  on without the cache; an entry that cannot be read back (cut short, garbled) is
  compiled again and replaced, with one warning line, never an error. On leaving, the
  cache settings in force before are restored.
- `CompileMeter` measures, while active, the seconds JAX spends tracing, lowering and
  compiling (or loading from the cache), as the union of the time spans JAX reports
  (`jax.monitoring`), so nested programs count once; and counts the executables built
  by XLA (`compilations`) and those loaded from the persistent cache (`cache_hits`).

The cache is trusted as code is: whoever can write to it can run code in the processes
that read it (JAX's warning); keep it in a directory of your own.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator

import jax
from jax import monitoring

ENV = "JAX_COMPILATION_CACHE_DIR"  # JAX's own variable, honoured as the default
DIRNAME = ".jax-cache"  # the default cache, below a local work directory
OFF = "none"
_SUFFIX = "-cache"  # the file name of an entry, as JAX's own file cache names it

_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_EXECUTABLE_EVENT = _COMPILE_EVENTS[2]  # one per executable built or loaded
_HIT_EVENT = "/jax/compilation_cache/cache_hits"


def user_cache_dir() -> str:
    """`$XDG_CACHE_HOME/ebm_jax/jax-cache` (default `~/.cache/ebm_jax/jax-cache`): the
    cache of a run whose work directory is not local (gs://...)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                            ".cache")
    return os.path.join(base, "ebm_jax", "jax-cache")


def cache_dir(workdir, option: str | None = None) -> str | None:
    """The cache directory of a run: `option` (`--compile-cache`: a directory, or
    "none" for no cache) when given; else `$JAX_COMPILATION_CACHE_DIR` when set; else
    `<workdir>/.jax-cache` for a local work directory, `user_cache_dir()` for another."""
    from ebm_jax.io import is_local

    if option is not None:
        return None if option.strip().lower() == OFF else option
    if os.environ.get(ENV):
        return os.environ[ENV]
    if is_local(workdir):
        return os.path.join(os.fspath(workdir), DIRNAME)
    return user_cache_dir()


def _decompress():
    """JAX's reader of a cache entry's bytes (it raises on a garbled entry)."""
    from jax._src import compilation_cache

    return compilation_cache.decompress_executable


class CheckedFileCache:
    """JAX's cache interface (`get`, `put`) over one local directory, one file per
    entry (`<key>-cache`, as JAX names them): the directory is made at the first use;
    an entry that does not decompress is reported missing (so JAX compiles it again);
    `put` writes atomically and replaces an entry (the one JAX could not load). The
    first failure to create, read or write the directory turns the cache off, with one
    line through `log`."""

    def __init__(self, path, log: Callable[[str], None] = print):
        import pathlib

        self._path = pathlib.Path(path)  # named as JAX's interface names it
        self._log = log
        self._ready: bool | None = None  # None: not tried yet; False: off
        self._lock = threading.Lock()

    def _usable(self) -> bool:
        with self._lock:
            if self._ready is None:
                try:
                    self._path.mkdir(parents=True, exist_ok=True)
                    probe = self._path / f".probe-{os.getpid()}"
                    probe.write_bytes(b"")
                    probe.unlink()
                    self._ready = True
                except OSError as error:
                    self._off(error)
            return bool(self._ready)

    def _off(self, error: OSError) -> None:
        if self._ready is False:  # said once
            return
        self._ready = False
        self._log(f"warning: compilation cache {self._path} cannot be written "
                  f"({error.strerror or error}); running without it "
                  f"(--compile-cache DIR or --compile-cache none)")

    def get(self, key: str) -> bytes | None:
        if not self._usable():
            return None
        path = self._path / f"{key}{_SUFFIX}"
        try:
            value = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            with self._lock:
                self._off(error)
            return None
        try:
            _decompress()(value)
        except Exception as error:  # any garbling the decompressor reports
            self._log(f"warning: compilation cache entry {path} cannot be read "
                      f"({str(error)[:100] or type(error).__name__}); compiling it again")
            return None
        return value

    def put(self, key: str, value: bytes) -> None:
        if not self._usable():
            return
        path = self._path / f"{key}{_SUFFIX}"
        tmp = self._path / f".{key}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            tmp.write_bytes(value)
            os.replace(tmp, path)
        except OSError as error:
            tmp.unlink(missing_ok=True)
            with self._lock:
                self._off(error)


def _jax_cache_module():
    """JAX's compilation-cache module where it has the hooks used here, else None."""
    try:
        from jax._src import compilation_cache as cc
    except ImportError:
        return None
    hooks = ("_cache", "_cache_initialized", "reset_cache", "decompress_executable")
    return cc if all(hasattr(cc, h) for h in hooks) else None


_SETTINGS = ("jax_enable_compilation_cache", "jax_compilation_cache_dir",
             "jax_persistent_cache_min_compile_time_secs",
             "jax_persistent_cache_min_entry_size_bytes")


@contextlib.contextmanager
def persistent_cache(path, log: Callable[[str], None] = print) -> Iterator[str | None]:
    """JAX's persistent compilation cache in `path` while inside (None: no cache at
    all, whatever `$JAX_COMPILATION_CACHE_DIR` says); yields the path in use (None when
    off). See the module docstring."""
    from ebm_jax.io import is_local

    cc = _jax_cache_module()
    before = {name: getattr(jax.config, name) for name in _SETTINGS}
    path = None if path is None else os.fspath(path)
    checked = path is not None and is_local(path) and cc is not None
    if path is not None and is_local(path) and not checked:  # JAX's own file cache
        if not CheckedFileCache(path, log)._usable():
            path = None
    if cc is not None:
        cc.reset_cache()
    if path is None:
        jax.config.update("jax_enable_compilation_cache", False)
    else:
        jax.config.update("jax_enable_compilation_cache", True)
        jax.config.update("jax_compilation_cache_dir", path)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)  # no minimum
        if checked:
            cc._cache = CheckedFileCache(path, log)
            cc._cache_initialized = True
    try:
        yield path
    finally:
        if cc is not None:
            cc.reset_cache()
        for name, value in before.items():
            jax.config.update(name, value)


def _union_seconds(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            total, end = total + (stop - start), stop
        elif stop > end:
            total, end = total + (stop - end), stop
    return total


class CompileMeter:
    """Compilation work in this process while the meter is active (see the module
    docstring); meters may nest and run side by side. `wall` is the seconds the
    meter has been active, whatever was compiled."""

    def __init__(self):
        self._spans: list[tuple[float, float]] = []
        self._executables = 0
        self._hits = 0
        self._started = self._stopped = None

    def _on_span(self, event: str, start: float, end: float, **_) -> None:
        if event in _COMPILE_EVENTS:
            self._spans.append((start, end))
            if event == _EXECUTABLE_EVENT:
                self._executables += 1

    def _on_event(self, event: str, **_) -> None:
        if event == _HIT_EVENT:
            self._hits += 1

    def __enter__(self) -> CompileMeter:
        self._started = time.perf_counter()
        monitoring.register_event_time_span_listener(self._on_span)
        monitoring.register_event_listener(self._on_event)
        return self

    def __exit__(self, *exc) -> bool:
        monitoring.unregister_event_time_span_listener(self._on_span)
        monitoring.unregister_event_listener(self._on_event)
        self._stopped = time.perf_counter()
        return False

    @property
    def seconds(self) -> float:
        """Seconds spent tracing, lowering and compiling or loading executables."""
        return _union_seconds(list(self._spans))

    @property
    def wall(self) -> float:
        if self._started is None:
            return 0.0
        return (self._stopped or time.perf_counter()) - self._started

    @property
    def cache_hits(self) -> int:
        """Executables loaded from the persistent cache."""
        return self._hits

    @property
    def compilations(self) -> int:
        """Executables XLA built (those loaded from the cache aside)."""
        return self._executables - self._hits


__all__ = ["DIRNAME", "ENV", "OFF", "CheckedFileCache", "CompileMeter", "cache_dir",
           "persistent_cache", "user_cache_dir"]
