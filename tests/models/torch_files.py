"""Writes a state dict of NumPy arrays in PyTorch's zip checkpoint layout without torch
(for tests of the reader and of `--config.pretrained`): archive/data.pkl, a protocol-2
pickle of an OrderedDict whose tensors are `torch._utils._rebuild_tensor_v2(storage,
offset, size, stride, requires_grad, hooks)` over persistent storages ("storage",
torch.<T>Storage, key, "cpu", numel), archive/data/<key>, each storage's
little-endian bytes, and archive/byteorder and archive/version (torch.load reads it). The globals are written as opcodes, so torch need not exist."""

from __future__ import annotations

import io
import pickle
import zipfile
from collections import OrderedDict

import numpy as np

_STORAGES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.int64): "LongStorage"}


class _Global:
    def __init__(self, module: str, name: str):
        self.module, self.name = module, name


class _Tensor:
    def __init__(self, key: str, array: np.ndarray):
        self.key, self.array = key, np.array(array, order="C")  # keeps 0-d arrays 0-d


class _Storage:
    def __init__(self, tensor: _Tensor):
        self.tensor = tensor


class _Pickler(pickle._Pickler):  # the pure-Python pickler: its dispatch can be extended
    dispatch = dict(pickle._Pickler.dispatch)

    def save_global_marker(self, obj):
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())

    def save_tensor(self, obj):
        a = obj.array
        strides = tuple(s // a.itemsize for s in a.strides)
        self.save(_Global("torch._utils", "_rebuild_tensor_v2"))
        self.save((_Storage(obj), 0, tuple(a.shape), strides, False, OrderedDict()))
        self.write(pickle.REDUCE)

    def persistent_id(self, obj):
        if isinstance(obj, _Storage):  # the storage argument of _rebuild_tensor_v2
            a = obj.tensor.array
            return ("storage", _Global("torch", _STORAGES[a.dtype]), obj.tensor.key, "cpu",
                    a.size)
        return None

    dispatch[_Global] = save_global_marker
    dispatch[_Tensor] = save_tensor


def write_torch_zip(path, state: dict) -> None:
    """`state` ({name: array of float32 or int64}) as a PyTorch zip checkpoint."""
    tensors = OrderedDict((k, _Tensor(str(i), np.asarray(v))) for i, (k, v) in
                          enumerate(state.items()))
    buf = io.BytesIO()
    _Pickler(buf, protocol=2).dump(tensors)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/byteorder", "little")
        z.writestr("archive/version", "3\n")
        for t in tensors.values():
            z.writestr(f"archive/data/{t.key}", t.array.astype(t.array.dtype.newbyteorder("<"))
                       .tobytes())


def random_resnet18_state(rng, channels) -> OrderedDict:
    """A torchvision-named ResNet-18 state dict (conv1 to layer4 and fc) whose conv1,
    layer1, layer2 and layer3 have `channels` (e.g. (8, 8, 16, 32):
    `SiamResNet18(width=0.125)`), random values."""
    state = OrderedDict()

    def conv(name, c_out, c_in, k):
        state[f"{name}.weight"] = rng.normal(0, (2 / (c_in * k * k)) ** 0.5,
                                             (c_out, c_in, k, k)).astype(np.float32)

    def bn(name, c):
        state[f"{name}.weight"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
        state[f"{name}.bias"] = rng.uniform(-0.2, 0.2, c).astype(np.float32)
        state[f"{name}.running_mean"] = rng.uniform(-0.5, 0.5, c).astype(np.float32)
        state[f"{name}.running_var"] = rng.uniform(0.5, 2.0, c).astype(np.float32)
        state[f"{name}.num_batches_tracked"] = np.array(100, np.int64)

    conv("conv1", channels[0], 3, 7)
    bn("bn1", channels[0])
    c_in = channels[0]
    for layer, c in zip((1, 2, 3, 4), (*channels[1:], 64)):
        for i in range(2):
            p = f"layer{layer}.{i}"
            conv(f"{p}.conv1", c, c_in if i == 0 else c, 3)
            bn(f"{p}.bn1", c)
            conv(f"{p}.conv2", c, c, 3)
            bn(f"{p}.bn2", c)
            if i == 0 and (layer > 1 or c_in != c):
                conv(f"{p}.downsample.0", c, c_in, 1)
                bn(f"{p}.downsample.1", c)
        c_in = c
    state["fc.weight"] = rng.normal(size=(10, 64)).astype(np.float32)
    state["fc.bias"] = np.zeros(10, np.float32)
    return state


LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001


class _LegacyPickler(_Pickler):
    dispatch = dict(_Pickler.dispatch)

    def persistent_id(self, obj):
        pid = super().persistent_id(obj)
        return None if pid is None else (*pid, None)  # the legacy id ends with a view


def write_torch_legacy(path, state: dict, *, parts: dict | None = None) -> None:
    """`state` as a PyTorch checkpoint of the format before torch 1.6: five pickles
    (magic number, protocol, system info, the state dict, the storage keys), then each
    storage as a little-endian int64 element count and its bytes. `parts` {index:
    object} replaces the object pickled at that position (0 magic ... 4 keys), as a
    crafted file would."""
    tensors = OrderedDict((k, _Tensor(str(i), np.asarray(v))) for i, (k, v) in
                          enumerate(state.items()))
    objects = [LEGACY_MAGIC, LEGACY_PROTOCOL,
               {"protocol_version": LEGACY_PROTOCOL, "little_endian": True,
                "type_sizes": {"short": 2, "int": 4, "long": 4}},
               tensors, [t.key for t in tensors.values()]]
    for index, obj in (parts or {}).items():
        objects[index] = obj
    buf = io.BytesIO()
    for obj in objects:
        _LegacyPickler(buf, protocol=2).dump(obj)
    for t in tensors.values():
        a = t.array.astype(t.array.dtype.newbyteorder("<"))
        buf.write(np.int64(a.size).astype("<i8").tobytes() + a.tobytes())
    with open(path, "wb") as f:
        f.write(buf.getvalue())
