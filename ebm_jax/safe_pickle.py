"""The one way the project reads a pickle: an unpickler that builds only the globals it
is given, on bytes whose every length field was checked first.

A pickle is a program: `pickle.load` calls whatever global the file names (`os.system`,
`builtins.eval`, ...), so a crafted PyTorch checkpoint or CIFAR batch would run code as
the user. Here

- every global is looked up in an allow-list (`{(module, name): callable}`) given by the
  caller; anything else is refused before it is called (`PickleRefusedError`);
- the bytes are scanned first (`pickletools.genops`, which reads but never calls): every
  counted string, bytes or buffer length must fit in what the file holds, so a header
  that declares terabytes is refused before a byte is allocated (the C unpickler
  allocates a declared length before it reads);
- NumPy arrays (`NUMPY_ARRAYS`) are rebuilt by this module, not by `ndarray.__setstate__`:
  plain numeric dtypes only (no object arrays, whose state NumPy trusts and would
  crash on), and the raw bytes must be exactly shape x itemsize.

    obj, end = restricted_load(data, NUMPY_ARRAYS, what="data_batch_1",
                               encoding="bytes")
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np


class PickleRefusedError(ValueError):
    """A pickle that names a global outside the allow-list, or is malformed or bigger
    than its file: refused, nothing in it was run."""


class _PendingDtype:
    """`numpy.dtype(...)` of a pickle, resolved once its state is known (only the
    plain form: byte order, no fields, no sub-array)."""

    def __init__(self, spec, align=False, copy=True):
        if isinstance(spec, bytes):  # written by Python 2, read with encoding="bytes"
            spec = spec.decode("ascii", "replace")
        if not isinstance(spec, str):
            raise PickleRefusedError(f"a dtype built from {type(spec).__name__} is refused")
        try:
            base = np.dtype(spec)
        except TypeError as error:
            raise PickleRefusedError(f"dtype {spec!r}: {error}") from error
        if base.kind not in "biufc":
            raise PickleRefusedError(f"dtype {spec!r} (kind {base.kind!r}) is refused: only "
                                     "bool, integer, float and complex arrays are read")
        self.dtype = base

    def __setstate__(self, state):
        order = state[1] if isinstance(state, tuple) and len(state) in (8, 9) else None
        order = order.decode("ascii", "replace") if isinstance(order, bytes) else order
        if order not in ("<", ">", "|", "=") or state[2:5] != (None, None, None):
            raise PickleRefusedError("a dtype with fields or sub-arrays is refused")
        if order in "<>":
            self.dtype = self.dtype.newbyteorder(order)


class _PendingArray:
    """`numpy.core.multiarray._reconstruct(ndarray, shape, dtype)` of a pickle: the array
    is made by `__setstate__` from exactly shape x itemsize bytes."""

    def __init__(self, subtype, shape, typecode):
        if subtype is not np.ndarray:
            raise PickleRefusedError("array subclasses are refused")
        self.array = None

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise PickleRefusedError("an array state that is not (version, shape, dtype, "
                                     "fortran, bytes) is refused")
        _, shape, dtype, fortran, raw = state
        if isinstance(dtype, _PendingDtype):
            dtype = dtype.dtype
        if not isinstance(dtype, np.dtype):
            raise PickleRefusedError(f"array dtype {dtype!r} is refused")
        if isinstance(raw, str):  # written by Python 2, read with encoding="latin1"
            raw = raw.encode("latin1")
        if not (isinstance(shape, tuple) and all(isinstance(n, int) and n >= 0
                                                  for n in shape)):
            raise PickleRefusedError(f"array shape {shape!r} is refused")
        if not isinstance(raw, (bytes, bytearray)):
            raise PickleRefusedError("array data that is not raw bytes is refused")
        if math.prod(shape) * dtype.itemsize != len(raw):
            raise PickleRefusedError(f"an array of shape {shape} and dtype {dtype} needs "
                                     f"{math.prod(shape) * dtype.itemsize} bytes; the file "
                                     f"holds {len(raw)}")
        self.array = np.frombuffer(bytes(raw), dtype).reshape(
            shape, order="F" if fortran else "C").copy()


def _frombuffer(buffer, dtype, shape, order):
    """`numpy.core.numeric._frombuffer`, which protocol 5 pickles arrays with: the
    buffer must be exactly shape x itemsize bytes of a plain dtype."""
    if not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)):
        raise PickleRefusedError(f"an array buffer of type {type(buffer).__name__} is "
                                 "refused")
    array = _PendingArray(np.ndarray, (0,), "b")
    array.__setstate__((1, tuple(shape), dtype, order == "F", bytes(buffer)))
    return array.array


def _latin1_encode(text, encoding="utf-8"):
    """`_codecs.encode`, which protocol-2 pickles of `bytes` use: text codecs only."""
    if not isinstance(text, str) or encoding.lower().replace("_", "-") not in (
            "latin1", "latin-1", "iso-8859-1", "utf-8", "utf8", "ascii"):
        raise PickleRefusedError(f"_codecs.encode with {encoding!r} is refused")
    return text.encode(encoding)


# The globals of a pickle of dicts, lists, bytes and plain NumPy arrays (CIFAR's
# batches: NumPy 1 and 2 module names, protocol 2's bytes).
NUMPY_ARRAYS: Mapping[tuple[str, str], Callable] = {
    ("numpy.core.multiarray", "_reconstruct"): _PendingArray,
    ("numpy._core.multiarray", "_reconstruct"): _PendingArray,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _PendingDtype,
    ("numpy.core.numeric", "_frombuffer"): _frombuffer,
    ("numpy._core.numeric", "_frombuffer"): _frombuffer,
    ("_codecs", "encode"): _latin1_encode,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, allowed, what, persistent_load, encoding):
        super().__init__(file, encoding=encoding)
        self._allowed, self._what, self._persistent = allowed, what, persistent_load

    def find_class(self, module, name):
        try:
            return self._allowed[(module, name)]
        except KeyError:
            raise PickleRefusedError(f"{self._what} names {module}.{name}, which is not "
                                     "on the list of what such a file may hold: refused "
                                     "(nothing in it was run)") from None

    def persistent_load(self, pid):
        if self._persistent is None:
            raise PickleRefusedError(f"{self._what}: unexpected persistent id {pid!r}")
        return self._persistent(pid)


def _resolve(obj, seen=None):
    """Replaces the pending arrays and dtypes in the containers of `obj` by NumPy's."""
    if isinstance(obj, _PendingArray):
        if obj.array is None:
            raise PickleRefusedError("an array without its state is refused")
        return obj.array
    if isinstance(obj, _PendingDtype):
        return obj.dtype
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return obj
    if isinstance(obj, dict):
        seen.add(id(obj))
        for key, value in obj.items():
            obj[key] = _resolve(value, seen)
    elif isinstance(obj, list):
        seen.add(id(obj))
        obj[:] = [_resolve(v, seen) for v in obj]
    elif isinstance(obj, tuple) and any(isinstance(v, (_PendingArray, _PendingDtype, dict,
                                                       list, tuple)) for v in obj):
        return tuple(_resolve(v, seen) for v in obj)
    return obj


def pickle_end(data, offset: int = 0, *, what: str = "the pickle") -> int:
    """The offset just past the pickle that starts at `offset` of `data` (bytes), after
    checking that every length the pickle declares fits in the bytes that follow;
    nothing is built or called."""
    view = memoryview(data)[offset:]
    stream = io.BytesIO(view)
    try:
        for opcode, _, _ in pickletools.genops(stream):
            if opcode.name == "STOP":
                return offset + stream.tell()
    except (ValueError, EOFError, UnicodeDecodeError) as error:
        raise PickleRefusedError(f"{what} is cut short or malformed ({error})") from error
    raise PickleRefusedError(f"{what} is cut short (no end of pickle)")


def restricted_load(data, allowed: Mapping[tuple[str, str], Callable], *,
                    what: str, offset: int = 0,
                    persistent_load: Callable | None = None,
                    encoding: str = "ASCII") -> tuple[object, int]:
    """(object, end offset) of the pickle at `offset` of `data` (bytes), built with only
    the globals of `allowed`; `what` names the file in errors. NumPy arrays of
    `NUMPY_ARRAYS` come back as plain `np.ndarray`s. Raises `PickleRefusedError` for a
    refused global and for bytes that are malformed or declare more than they hold."""
    end = pickle_end(data, offset, what=what)
    unpickler = _Unpickler(io.BytesIO(memoryview(data)[offset:end]), allowed, what,
                           persistent_load, encoding)
    try:
        obj = unpickler.load()
    except PickleRefusedError as error:
        if what in str(error):
            raise
        # a refusal deep in an array or a dtype: the file's name first, as every error
        raise PickleRefusedError(f"{what}: {error}") from None
    except Exception as error:  # noqa: BLE001 (any malformed pickle: one line)
        raise PickleRefusedError(f"{what} is not a readable pickle "
                                 f"({type(error).__name__}: {error})") from error
    return _resolve(obj), end


def restricted_load_file(path, allowed: Mapping[tuple[str, str], Callable], *,
                         encoding: str = "ASCII") -> object:
    """The one pickle a file holds, read with `restricted_load` (the file is read once;
    its length bounds everything the pickle may declare)."""
    data = Path(path).read_bytes()
    obj, end = restricted_load(data, allowed, what=str(path), encoding=encoding)
    if end != len(data):
        raise PickleRefusedError(f"{path} holds {len(data) - end} bytes after its pickle")
    return obj


__all__ = ["NUMPY_ARRAYS", "PickleRefusedError", "pickle_end", "restricted_load",
           "restricted_load_file"]
