"""No file a user loads runs code, and none makes the reader allocate more than the file
holds: crafted PyTorch checkpoints (both of torch.save's formats, a payload at every
pickle position), CIFAR-10 batches and raw pickles whose payload would create a marker
file; headers that declare terabytes; a zip bomb. Each is refused in one line naming
the file, and the marker never appears."""

from __future__ import annotations

import builtins
import io
import os
import pickle
import subprocess
import tracemalloc
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

from ebm_jax.data.images import load_cifar10
from ebm_jax.models.torch_weights import TorchCheckpointError, read_torch_state_dict
from ebm_jax.safe_pickle import NUMPY_ARRAYS, PickleRefusedError, restricted_load
from tests.models.torch_files import (
    random_resnet18_state,
    write_torch_legacy,
    write_torch_zip,
)


class _Call:
    """Pickles as `func(*args)`: what a crafted file makes `pickle.load` call."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _payloads(marker):
    """Three ways to run `touch marker` from a pickle."""
    return {
        "os.system": _Call(os.system, f"touch {marker}"),
        "eval": _Call(builtins.eval, f"__import__('os').system('touch {marker}')"),
        "subprocess": _Call(subprocess.call, ["touch", str(marker)]),
    }


PAYLOADS = ("os.system", "eval", "subprocess")
LEGACY_PARTS = {0: "magic number", 1: "protocol", 2: "system info", 3: "state dict",
                4: "storage keys"}
STATE = OrderedDict([("w", np.arange(6, dtype=np.float32).reshape(2, 3)),
                     ("n", np.array(3, np.int64))])


@pytest.fixture
def marker(tmp_path):
    path = tmp_path / "RAN"
    yield path
    assert not path.exists(), "a payload ran"


def test_the_payloads_do_run_under_plain_pickle(tmp_path):
    """The control: each payload does create its marker when unpickled the unsafe way,
    so the refusals below are refusals of working exploits."""
    for name, payload in _payloads(tmp_path / "control").items():
        pickle.loads(pickle.dumps(payload))
        assert (tmp_path / "control").exists(), name
        (tmp_path / "control").unlink()


@pytest.mark.parametrize("payload", PAYLOADS)
@pytest.mark.parametrize("part", sorted(LEGACY_PARTS))
def test_a_legacy_checkpoint_runs_nothing_at_any_pickle_position(tmp_path, marker, part,
                                                                   payload):
    evil = _payloads(marker)[payload]
    obj = OrderedDict(STATE, extra=evil) if part == 3 else evil
    path = tmp_path / "evil.pth"
    write_torch_legacy(path, STATE, parts={part: obj})
    with pytest.raises(TorchCheckpointError, match="evil.pth") as error:
        read_torch_state_dict(path)
    assert len(str(error.value).splitlines()) == 1


def test_a_valid_resnet18_whose_key_list_is_built_by_eval_is_refused(tmp_path, marker):
    """The quiet case: every tensor is right, only the storage keys' pickle calls eval,
    which would return the right list after running its payload."""
    state = random_resnet18_state(np.random.default_rng(0), (8, 8, 16, 32))
    keys = [str(i) for i in range(len(state))]
    evil = _Call(builtins.eval, f"{keys!r} if __import__('os').system('touch {marker}') "
                                f"== 0 else {keys!r}")
    path = tmp_path / "resnet18.pth"
    write_torch_legacy(path, state, parts={4: evil})
    with pytest.raises(TorchCheckpointError, match=r"storage keys.*eval, which is not on the list"):
        read_torch_state_dict(path)
    write_torch_legacy(path, state)  # the same file without the payload reads
    assert read_torch_state_dict(path).keys() == state.keys()


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_zip_checkpoint_runs_nothing(tmp_path, marker, payload):
    evil = _payloads(marker)[payload]
    for i, obj in enumerate([evil, OrderedDict(w=evil), [evil]]):
        path = tmp_path / f"evil{i}.pth"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", pickle.dumps(obj, protocol=i + 2))
        with pytest.raises(TorchCheckpointError, match="refused"):
            read_torch_state_dict(path)


def test_a_payload_in_a_storage_id_runs_nothing(tmp_path, marker):
    storage = object()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", _Call(os.system, f"touch {marker}"), "0", "cpu", 1) \
                if obj is storage else None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({"w": storage})
    path = tmp_path / "evil.pth"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", buf.getvalue())
        z.writestr("archive/data/0", b"\0" * 4)
    with pytest.raises(TorchCheckpointError, match="posix.system|refused"):
        read_torch_state_dict(path)


def test_a_truncated_zip_is_named_as_such_and_runs_nothing(tmp_path):
    path = tmp_path / "cut.pth"
    write_torch_zip(path, STATE)
    path.write_bytes(path.read_bytes()[:-40])  # the central directory is cut
    with pytest.raises(TorchCheckpointError, match="cut short or damaged"):
        read_torch_state_dict(path)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_cifar_batch_runs_nothing(tmp_path, marker, payload):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (2, 3072), dtype=np.uint8),
                 b"labels": [1, 2]}
        if name == "data_batch_1":
            batch[b"batch_label"] = _payloads(marker)[payload]
        (root / name).write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(ValueError, match="data_batch_1.*refused"):
        load_cifar10(root)


def test_a_cifar_batch_of_object_arrays_is_refused(tmp_path):
    """NumPy trusts an object array's pickled state (a mismatched one crashes the
    interpreter): only plain numeric arrays are read."""
    data = pickle.dumps({b"data": np.array([1, "a"], dtype=object)}, protocol=2)
    with pytest.raises(PickleRefusedError, match="kind 'O'.* is refused"):
        restricted_load(data, NUMPY_ARRAYS, what="batch")


def test_numpy_arrays_round_trip_through_the_allow_list():
    arrays = {b"c": np.arange(12, dtype=np.uint8).reshape(3, 4),
              b"f": np.asfortranarray(np.arange(6.0).reshape(2, 3)),
              b"big": np.arange(3, dtype=">i4"), b"labels": [1, 2, 3]}
    for protocol in (2, 4, 5):
        obj, _ = restricted_load(pickle.dumps(arrays, protocol=protocol), NUMPY_ARRAYS,
                                 what="t", encoding="bytes")
        for key, value in arrays.items():
            np.testing.assert_array_equal(obj[key], value)
        assert obj[b"big"].dtype == np.dtype(">i4")


# ------------------------------------------------ sizes checked before allocating


def test_a_pickle_declaring_a_terabyte_of_bytes_is_refused_before_allocating():
    data = b"\x80\x04\x8e" + (2 ** 40).to_bytes(8, "little") + b"abc."
    with pytest.raises(PickleRefusedError, match="cut short or malformed"):
        restricted_load(data, {}, what="header")


def _state_pickle(*, numel: int, size=(1,), stride=(1,), legacy: bool = False) -> bytes:
    """A one-tensor state dict's pickle as torch writes it, with the storage's declared
    element count and the tensor's size and stride as given (a crafted header)."""
    import tests.models.torch_files as tf

    class Pickler(tf._Pickler):
        dispatch = dict(tf._Pickler.dispatch)

        def save_tensor(self, obj):
            self.save(tf._Global("torch._utils", "_rebuild_tensor_v2"))
            self.save((tf._Storage(obj), 0, size, stride, False, OrderedDict()))
            self.write(pickle.REDUCE)

        def persistent_id(self, obj):
            if not isinstance(obj, tf._Storage):
                return None
            pid = ("storage", tf._Global("torch", "FloatStorage"), "0", "cpu", numel)
            return (*pid, None) if legacy else pid

        dispatch[tf._Tensor] = save_tensor

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump(OrderedDict(w=tf._Tensor("0", np.zeros(1, np.float32))))
    return buf.getvalue()


def test_a_legacy_storage_larger_than_the_file_is_refused_before_allocating(tmp_path):
    """A header that declares 2**42 floats (16 TiB) for a storage of the file."""
    import tests.models.torch_files as tf

    head = b"".join(pickle.dumps(obj, protocol=2) for obj in
                    (tf.LEGACY_MAGIC, tf.LEGACY_PROTOCOL, {"little_endian": True}))
    path = tmp_path / "huge.pth"
    path.write_bytes(head + _state_pickle(numel=2 ** 42, legacy=True)
                     + pickle.dumps(["0"], protocol=2) + np.int64(1).tobytes() + b"\0" * 4)
    with pytest.raises(TorchCheckpointError, match="more than the file holds"):
        read_torch_state_dict(path)


def _zip(path, data_pkl: bytes, storage: bytes, compression=zipfile.ZIP_STORED) -> None:
    with zipfile.ZipFile(path, "w", compression) as z:
        z.writestr("archive/data.pkl", data_pkl)
        z.writestr("archive/data/0", storage)


def test_a_zip_bomb_is_refused_before_it_expands(tmp_path):
    numel = 8 * 2 ** 20  # 32 MiB of zeros, deflated to a few tens of KiB
    path = tmp_path / "bomb.pth"
    _zip(path, _state_pickle(numel=numel), b"\0" * 4 * numel, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 4 * numel / 100
    tracemalloc.start()
    try:
        with pytest.raises(TorchCheckpointError, match="zip bomb"):
            read_torch_state_dict(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < numel  # a quarter of the expanded size: never expanded


def test_a_tensor_larger_than_its_storage_is_refused(tmp_path):
    """A stride-0 view of 10**12 elements over one float would be copied in full."""
    path = tmp_path / "expand.pth"
    _zip(path, _state_pickle(numel=1, size=(10 ** 6, 10 ** 6), stride=(0, 0)),
         np.zeros(1, np.float32).tobytes())
    with pytest.raises(TorchCheckpointError, match="overruns its storage"):
        read_torch_state_dict(path)
    _zip(path, _state_pickle(numel=1), np.zeros(1, np.float32).tobytes())
    assert read_torch_state_dict(path)["w"].shape == (1,)  # the same file, honest


@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_non_finite_weights_are_refused_naming_the_first_tensor(tmp_path, kind):
    state = OrderedDict([("a", np.ones(3, np.float32)),
                         ("b", np.array([1.0, np.nan, np.inf], np.float32)),
                         ("c", np.array([np.nan], np.float32))])
    path = tmp_path / "nan.pth"
    (write_torch_zip if kind == "zip" else write_torch_legacy)(path, state)
    with pytest.raises(TorchCheckpointError, match=r"tensor b holds 2 non-finite"):
        read_torch_state_dict(path)
    assert np.isnan(read_torch_state_dict(path, finite=False)["c"]).all()
