"""PyTorch checkpoints read without PyTorch, and torchvision's ResNet-18 weights loaded
into `SiamResNet18`.

    state = read_torch_state_dict("resnet18-f37072fd.pth")   # {name: np.ndarray}
    unused = load_torchvision_resnet18(model, state)           # layer4.*, fc.* unused

`read_torch_state_dict` reads both of `torch.save`'s formats: the zip archive (torch >=
1.6: `<archive>/data.pkl` and one `<archive>/data/<key>` file of raw little-endian
bytes per storage) and the legacy one (a magic number, a protocol number, the system
info, the pickled object, the list of storage keys, then each storage as an int64
element count and its bytes). The pickles are read by an unpickler that knows only the
handful of globals a state dict needs (OrderedDict, the tensor and parameter rebuild
functions, the typed storages): a checkpoint that names anything else is refused, so
reading a file never runs code from it.

`load_torchvision_resnet18` converts layouts (a PyTorch kernel (out, in, kh, kw) is
Flax's (kh, kw, in, out)) and copies the batch-norm statistics (running mean and
variance; `num_batches_tracked` is not used), layer by layer, checking every shape.
"""

from __future__ import annotations

import collections
import io
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001

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
        if _STORAGE_DTYPES.get(name) is None:
            raise TorchCheckpointError(f"storages of type torch.{name} are not supported")
        self.name, self.dtype = name, np.dtype(_STORAGE_DTYPES[name])


def _rebuild_tensor(storage, offset, size, stride, *_):
    """torch._utils._rebuild_tensor_v2 / _rebuild_tensor: a strided view of the storage
    (the legacy format fills storages after the pickle: copied once the file is read)."""
    flat = storage
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if not size:
        return flat[offset:offset + 1].reshape(())
    needed = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
    if any(n == 0 for n in size):
        return np.zeros(size, flat.dtype)
    if needed > flat.size:
        raise TorchCheckpointError(f"a tensor of size {size} and stride {stride} at offset "
                                   f"{offset} overruns its storage of {flat.size} elements")
    return np.lib.stride_tricks.as_strided(flat[offset:], size,
                                           [s * flat.itemsize for s in stride])


def _rebuild_parameter(data, *_):
    return data


_GLOBALS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, load_storage):
        super().__init__(file)
        self._load_storage = load_storage

    def find_class(self, module, name):
        if (module, name) in _GLOBALS:
            return _GLOBALS[(module, name)]
        if module == "torch" and name.endswith("Storage"):
            return _StorageType(name)
        raise TorchCheckpointError(f"the checkpoint names {module}.{name}, which a state "
                                   "dict of tensors does not need: refused")

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] == "storage"):
            raise TorchCheckpointError(f"unexpected persistent id {pid!r}")
        storage_type, key, numel = pid[1], str(pid[2]), int(pid[4])
        if not isinstance(storage_type, _StorageType):
            raise TorchCheckpointError(f"unexpected storage type {storage_type!r}")
        if len(pid) > 5 and pid[5] is not None:
            raise TorchCheckpointError("storage views (legacy format) are not supported")
        return self._load_storage(key, storage_type.dtype, numel)


def _read_zip(path: Path) -> dict:
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        pkl = [n for n in names if n.endswith("/data.pkl") or n == "data.pkl"]
        if len(pkl) != 1:
            raise TorchCheckpointError(f"{path}: a zip without one data.pkl is not a "
                                       "PyTorch checkpoint")
        prefix = pkl[0][:-len("data.pkl")]
        cache = {}

        def load_storage(key, dtype, numel):
            if key not in cache:
                raw = archive.read(f"{prefix}data/{key}")
                if len(raw) < numel * dtype.itemsize:
                    raise TorchCheckpointError(f"{path}: storage {key} holds {len(raw)} "
                                               f"bytes, {numel} x {dtype} needs more")
                cache[key] = np.frombuffer(raw, dtype.newbyteorder("<"), count=numel)
            return cache[key]

        return _Unpickler(io.BytesIO(archive.read(pkl[0])), load_storage).load()


def _read_legacy(path: Path) -> dict:
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception as error:  # noqa: BLE001 (any unreadable start)
            raise TorchCheckpointError(f"{path} is neither a zip nor a legacy PyTorch "
                                       f"checkpoint ({error})") from error
        if magic != LEGACY_MAGIC:
            raise TorchCheckpointError(f"{path} is not a PyTorch checkpoint (magic number "
                                       f"{magic!r})")
        protocol = pickle.load(f)
        if protocol != LEGACY_PROTOCOL:
            raise TorchCheckpointError(f"{path}: legacy protocol {protocol!r} is not "
                                       f"{LEGACY_PROTOCOL}")
        sys_info = pickle.load(f)
        if not sys_info.get("little_endian", True):
            raise TorchCheckpointError(f"{path} was written big-endian: not supported")
        wanted = {}  # key -> (dtype, numel, array filled below)

        def load_storage(key, dtype, numel):
            if key not in wanted:
                wanted[key] = np.empty(numel, dtype)
            return wanted[key]

        result = _Unpickler(f, load_storage).load()
        keys = pickle.load(f)
        for key in keys:
            count = int(np.frombuffer(f.read(8), "<i8")[0])
            target = wanted.get(str(key))
            if target is None:
                raise TorchCheckpointError(f"{path}: storage {key} is not referenced")
            raw = f.read(count * target.itemsize)
            if count != target.size or len(raw) != count * target.itemsize:
                raise TorchCheckpointError(f"{path}: storage {key} is cut short or has "
                                           f"{count} elements, {target.size} expected")
            target[:] = np.frombuffer(raw, target.dtype.newbyteorder("<"))
        return result


def read_torch_state_dict(path) -> dict[str, np.ndarray]:
    """{name: array} of a PyTorch checkpoint holding a state dict (or a dict with a
    "state_dict" entry), without PyTorch; see the module docstring."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    data = _read_zip(path) if zipfile.is_zipfile(path) else _read_legacy(path)
    if isinstance(data, Mapping) and "state_dict" in data:
        data = data["state_dict"]
    if not isinstance(data, Mapping) or not all(
            isinstance(k, str) and isinstance(v, np.ndarray) for k, v in data.items()):
        raise TorchCheckpointError(f"{path} does not hold a state dict of tensors")
    return {k: np.array(v) for k, v in data.items()}  # copies: own, writable memory


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
