"""PyTorch checkpoints read without PyTorch, and torchvision's ResNet-18 weights loaded
into `SiamResNet18`.

    state = read_torch_state_dict("resnet18-f37072fd.pth")   # {name: np.ndarray}
    unused = load_torchvision_resnet18(model, state)           # layer4.*, fc.* unused

`read_torch_state_dict` reads both of `torch.save`'s formats: the zip archive (torch >=
1.6: `<archive>/data.pkl` and one `<archive>/data/<key>` file of raw little-endian
bytes per storage) and the legacy one (a magic number, a protocol number, the system
info, the pickled object, the list of storage keys, then each storage as an int64
element count and its bytes). Every pickle of both formats goes through the project's
one restricted unpickler (`ebm_jax.safe_pickle`): the state dict's may name only the
handful of globals a state dict needs (OrderedDict, the tensor and parameter rebuild
functions, the typed storages), the legacy header's none at all, so reading a file
never runs code from it. Sizes are checked against the file before anything is
allocated: a storage larger than the bytes left, a tensor larger than its storage, a
zip whose members expand past `MAX_EXPANSION` times the file are refused.

`load_torchvision_resnet18` converts layouts (a PyTorch kernel (out, in, kh, kw) is
Flax's (kh, kw, in, out)) and copies the batch-norm statistics (running mean and
variance; `num_batches_tracked` is not used), layer by layer, checking every shape.
"""

from __future__ import annotations

import collections
import math
import struct
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from ebm_jax.safe_pickle import PickleRefusedError, restricted_load

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
# a zip's members may expand to at most this many times the file's length (torch.save
# stores them uncompressed, so a real checkpoint expands to less than its file)
MAX_EXPANSION = 4

_STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64, "HalfStorage": np.float16,
    "BFloat16Storage": None, "LongStorage": np.int64, "IntStorage": np.int32,
    "ShortStorage": np.int16, "CharStorage": np.int8, "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class TorchCheckpointError(ValueError):
    """A file that is not a PyTorch state dict this reader can take."""


class _StorageType:
    """Stands in for `torch.<Name>Storage` in a pickle: only its dtype matters."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = None if _STORAGE_DTYPES[name] is None else np.dtype(_STORAGE_DTYPES[name])


def _rebuild_tensor(storage, offset, size, stride, *_):
    """torch._utils._rebuild_tensor_v2 / _rebuild_tensor: a strided view of the storage
    (the legacy format fills storages after the pickle: copied once the file is read).
    A tensor with more elements than its storage, or that reaches outside it, is
    refused: its copy would allocate what the file does not hold."""
    if not isinstance(storage, np.ndarray):
        raise TorchCheckpointError(f"a tensor over {type(storage).__name__}, not a storage")
    flat = storage
    try:
        offset = int(offset)
        size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    except (TypeError, ValueError) as error:
        raise TorchCheckpointError(f"a tensor with size {size!r} and stride {stride!r}: "
                                   "not integers") from error
    if len(size) != len(stride) or offset < 0 or min(size + stride, default=0) < 0:
        raise TorchCheckpointError(f"a tensor of size {size}, stride {stride} and offset "
                                   f"{offset} is not a view of a storage")
    if not size:
        if offset >= flat.size:
            raise TorchCheckpointError(f"a scalar at offset {offset} overruns its storage "
                                       f"of {flat.size} elements")
        return flat[offset:offset + 1].reshape(())
    if any(n == 0 for n in size):
        return np.zeros(size, flat.dtype)
    needed = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    if needed > flat.size or math.prod(size) > flat.size:
        raise TorchCheckpointError(f"a tensor of size {size} and stride {stride} at offset "
                                   f"{offset} overruns its storage of {flat.size} elements")
    return np.lib.stride_tricks.as_strided(flat[offset:], size,
                                           [s * flat.itemsize for s in stride])


def _rebuild_parameter(data, *_):
    return data


# The globals a state dict needs; `torch.<Name>Storage` stand for their dtypes.
_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in _STORAGE_DTYPES},
}


def _persistent_storage(load_storage):
    """The persistent-id hook of a state dict's pickle: ("storage", type, key, location,
    numel[, view]) -> `load_storage(key, dtype, numel)`."""

    def persistent_load(pid):
        if not (isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage"):
            raise TorchCheckpointError(f"unexpected persistent id {pid!r}")
        storage_type, key = pid[1], str(pid[2])
        if not isinstance(storage_type, _StorageType):
            raise TorchCheckpointError(f"unexpected storage type {storage_type!r}")
        if storage_type.dtype is None:
            raise TorchCheckpointError(f"storages of type torch.{storage_type.name} are "
                                       "not supported")
        try:
            numel = int(pid[4])
        except (TypeError, ValueError) as error:
            raise TorchCheckpointError(f"storage {key}: size {pid[4]!r}") from error
        if numel < 0:
            raise TorchCheckpointError(f"storage {key} declares {numel} elements")
        if len(pid) > 5 and pid[5] is not None:
            raise TorchCheckpointError("storage views (legacy format) are not supported")
        return load_storage(key, storage_type.dtype, numel)

    return persistent_load


def _load(data, path: Path, part: str, *, offset: int = 0, load_storage=None,
          allowed=_GLOBALS):
    """(object, end) of one pickle of a checkpoint, through the restricted unpickler."""
    try:
        return restricted_load(
            data, allowed, what=f"{path} ({part})", offset=offset,
            persistent_load=None if load_storage is None else _persistent_storage(load_storage))
    except PickleRefusedError as error:
        raise TorchCheckpointError(str(error)) from error
    except TorchCheckpointError as error:
        raise TorchCheckpointError(f"{path} ({part}): {error}") from error


def _read_zip(path: Path, file_size: int) -> dict:
    with zipfile.ZipFile(path) as archive:
        infos = {info.filename: info for info in archive.infolist()}
        pkl = [n for n in infos if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkl) != 1:
            raise TorchCheckpointError(f"{path}: a zip without one data.pkl is not a "
                                       "PyTorch checkpoint")
        prefix = pkl[0][:-len("data.pkl")]
        budget = [MAX_EXPANSION * file_size]  # bytes the members may still expand to
        cache = {}

        def read_member(name: str) -> bytes:
            info = infos.get(name)
            if info is None:
                raise TorchCheckpointError(f"{path}: no member {name}")
            budget[0] -= info.file_size
            if budget[0] < 0:
                raise TorchCheckpointError(
                    f"{path}: its members expand to more than {MAX_EXPANSION} x the "
                    f"file's {file_size} bytes (a zip bomb?); torch.save stores them "
                    "uncompressed: refused before expanding them")
            return archive.read(name)

        def load_storage(key, dtype, numel):
            if key not in cache:
                name = f"{prefix}data/{key}"
                info = infos.get(name)
                if info is None or info.file_size < numel * dtype.itemsize:
                    have = "no" if info is None else f"{info.file_size}"
                    raise TorchCheckpointError(f"storage {key} holds {have} bytes, {numel} "
                                               f"x {dtype} needs more")
                raw = read_member(name)
                cache[key] = np.frombuffer(raw, dtype.newbyteorder("<"), count=numel)
            return cache[key]

        data = read_member(pkl[0])
        result, end = _load(data, path, pkl[0], load_storage=load_storage)
        if end != len(data):
            raise TorchCheckpointError(f"{path}: {pkl[0]} holds bytes after its pickle")
        return result


def _read_legacy(path: Path, data: bytes) -> dict:
    """The format before torch 1.6: five pickles (magic number, protocol, system info,
    the object, the storage keys), then each storage as an int64 count and its bytes;
    every pickle goes through the restricted unpickler (plain values only where no
    tensor can be), every storage's size is checked against the bytes left."""
    if data[:4] == b"PK\x03\x04":
        raise TorchCheckpointError(f"{path} starts as a zip archive but is cut short or "
                                   "damaged (no readable central directory)")
    try:
        magic, pos = restricted_load(data, {}, what=str(path))
    except PickleRefusedError as error:
        raise TorchCheckpointError(f"{path} is neither a zip nor a legacy PyTorch "
                                   f"checkpoint ({error})") from error
    if magic != LEGACY_MAGIC:
        raise TorchCheckpointError(f"{path} is not a PyTorch checkpoint (magic number "
                                   f"{magic!r})")
    protocol, pos = _load(data, path, "protocol", offset=pos, allowed={})
    if protocol != LEGACY_PROTOCOL:
        raise TorchCheckpointError(f"{path}: legacy protocol {protocol!r} is not "
                                   f"{LEGACY_PROTOCOL}")
    sys_info, pos = _load(data, path, "system info", offset=pos, allowed={})
    if not isinstance(sys_info, dict):
        raise TorchCheckpointError(f"{path}: its system info is not a dict")
    if not sys_info.get("little_endian", True):
        raise TorchCheckpointError(f"{path} was written big-endian: not supported")
    wanted = {}  # key -> array filled below
    left = [len(data) - pos]  # bytes the storages may still take

    def load_storage(key, dtype, numel):
        if key not in wanted:
            left[0] -= numel * dtype.itemsize
            if left[0] < 0:
                raise TorchCheckpointError(f"storage {key} declares {numel} x {dtype}, more "
                                           "than the file holds: refused before allocating")
            wanted[key] = np.empty(numel, dtype)
        return wanted[key]

    result, pos = _load(data, path, "state dict", offset=pos, load_storage=load_storage)
    keys, pos = _load(data, path, "storage keys", offset=pos, allowed={})
    if not isinstance(keys, list):
        raise TorchCheckpointError(f"{path}: its storage keys are not a list")
    for key in keys:
        target = wanted.get(str(key))
        if target is None:
            raise TorchCheckpointError(f"{path}: storage {key} is not referenced")
        count = int(np.frombuffer(data[pos:pos + 8], "<i8")[0]) if pos + 8 <= len(data) else -1
        nbytes = count * target.itemsize
        if count != target.size or pos + 8 + nbytes > len(data):
            raise TorchCheckpointError(f"{path}: storage {key} is cut short or has "
                                       f"{count} elements, {target.size} expected")
        target[:] = np.frombuffer(data, target.dtype.newbyteorder("<"), count, pos + 8)
        pos += 8 + nbytes
    return result


# what Python's zipfile raises on a damaged or unsupported archive: a bad header or
# checksum (BadZipFile, zlib.error, struct.error, EOFError, OSError "Invalid data
# stream"), an unknown compression method (NotImplementedError), an encrypted member
# (RuntimeError "password required"), a name or size it cannot decode
_ZIP_DAMAGE = (zipfile.BadZipFile, zlib.error, struct.error, EOFError, OSError,
               NotImplementedError, RuntimeError, UnicodeDecodeError, ValueError,
               OverflowError, KeyError, IndexError)


def read_torch_state_dict(path, *, finite: bool = True) -> dict[str, np.ndarray]:
    """{name: array} of a PyTorch checkpoint holding a state dict (or a dict with a
    "state_dict" entry), without PyTorch; see the module docstring. With `finite`, a
    floating tensor holding NaN or inf is refused, naming the first one."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        is_zip = zipfile.is_zipfile(path)
    except _ZIP_DAMAGE:  # an end record it reads, then refuses (a multi-disk archive)
        is_zip = True
    if is_zip:
        try:
            data = _read_zip(path, path.stat().st_size)
        except TorchCheckpointError:
            raise
        except _ZIP_DAMAGE as error:  # a damaged archive: its header, its compression,
            # its checksums, an encrypted or unknown-method member
            raise TorchCheckpointError(
                f"{path}: a damaged zip archive ({type(error).__name__}: {error}); "
                "save the checkpoint again with torch.save") from None
    else:
        data = _read_legacy(path, path.read_bytes())
    if isinstance(data, Mapping) and "state_dict" in data:
        data = data["state_dict"]
    if not isinstance(data, Mapping) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in data.items()):
        raise TorchCheckpointError(f"{path} does not hold a state dict of tensors")
    state = {k: np.array(v) for k, v in data.items()}  # copies: own, writable memory
    if finite:
        for name, value in state.items():
            if value.dtype.kind in "fc" and not np.isfinite(value).all():
                bad = int(np.size(value) - np.isfinite(value).sum())
                raise TorchCheckpointError(
                    f"{path}: tensor {name} holds {bad} non-finite values (NaN or inf) "
                    f"of {value.size}: refused")
    return state


def _set(variable, value, name: str) -> None:
    value = np.asarray(value)
    if tuple(variable[...].shape) != value.shape:
        raise TorchCheckpointError(
            f"{name}: the checkpoint's {value.shape} does not fit the model's "
            f"{tuple(variable[...].shape)} (a torchvision ResNet-18 fits width=1.0)")
    variable[...] = jnp.asarray(value, variable[...].dtype)


def _conv_into(conv, state, name: str, used: set) -> None:
    _set(conv.kernel, np.transpose(state[f"{name}.weight"], (2, 3, 1, 0)), f"{name}.weight")
    used.add(f"{name}.weight")


def _bn_into(bn, state, name: str, used: set) -> None:
    for ours, theirs in (("scale", "weight"), ("bias", "bias"), ("mean", "running_mean"),
                         ("var", "running_var")):
        _set(getattr(bn, ours), state[f"{name}.{theirs}"], f"{name}.{theirs}")
        used.add(f"{name}.{theirs}")
    used.add(f"{name}.num_batches_tracked")


def load_torchvision_resnet18(model, state: Mapping[str, np.ndarray]) -> list[str]:
    """Copies torchvision ResNet-18 weights (`state`, e.g. from
    `read_torch_state_dict`) into a `SiamResNet18` in place, conv1 to layer3 (the
    adjust layer keeps its initialisation); returns the checkpoint's keys not used
    (layer4.*, fc.*). A missing key or a shape that does not fit raises naming it."""
    missing = [k for k in ("conv1.weight", "bn1.running_mean", "layer3.1.bn2.weight")
               if k not in state]
    if missing:
        raise TorchCheckpointError(f"not a torchvision ResNet-18 state dict: no {missing}")
    used: set[str] = set()
    try:
        _conv_into(model.conv1, state, "conv1", used)
        _bn_into(model.bn1, state, "bn1", used)
        for layer in (1, 2, 3):
            for i, block in enumerate(getattr(model, f"layer{layer}")):
                prefix = f"layer{layer}.{i}"
                _conv_into(block.conv1, state, f"{prefix}.conv1", used)
                _bn_into(block.bn1, state, f"{prefix}.bn1", used)
                _conv_into(block.conv2, state, f"{prefix}.conv2", used)
                _bn_into(block.bn2, state, f"{prefix}.bn2", used)
                if block.proj is not None:
                    conv, bn = block.proj.layers
                    _conv_into(conv, state, f"{prefix}.downsample.0", used)
                    _bn_into(bn, state, f"{prefix}.downsample.1", used)
    except KeyError as error:
        raise TorchCheckpointError(f"the state dict has no {error.args[0]!r}, which a "
                                   "torchvision ResNet-18 has") from error
    return sorted(k for k in state if k not in used)


__all__ = ["TorchCheckpointError", "load_torchvision_resnet18", "read_torch_state_dict"]
