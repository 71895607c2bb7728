"""PyTorch checkpoints read without PyTorch (both of torch.save's formats, from files
written by torch itself: tests/models/data/make_torch_fixtures.py), refused globals,
and torchvision ResNet-18 weights loaded into SiamResNet18, checked against a NumPy
float64 forward of the same weights: conv1 within a float32 bound carried through it,
layer3 within a stated tolerance (no useful bound exists that deep)."""

import io
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.siam_resnet import IMAGENET_MEAN, IMAGENET_STD, SiamResNet18
from ebm_jax.models.torch_weights import (
    TorchCheckpointError,
    load_torchvision_resnet18,
    read_torch_state_dict,
)
from tests.models.torch_files import random_resnet18_state
from tests.tolerances import EPS32, assert_within, float32_sum_atol

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize("kind", ["zip", "legacy"])
def test_reads_both_checkpoint_formats_written_by_torch(kind):
    state = read_torch_state_dict(DATA / f"torch_state_dict_{kind}.pt")
    assert list(state) == ["conv.weight", "conv.transposed", "bn.running_var",
                           "bn.num_batches_tracked", "param", "shared.a", "shared.b",
                           "empty"]
    np.testing.assert_array_equal(state["conv.weight"],
                                  np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    np.testing.assert_array_equal(state["conv.transposed"],
                                  np.arange(12, dtype=np.float32).reshape(3, 4).T)
    assert state["bn.running_var"].dtype == np.float64
    np.testing.assert_array_equal(state["bn.running_var"], np.arange(5) + 0.25)
    assert state["bn.num_batches_tracked"].dtype == np.int64
    assert state["bn.num_batches_tracked"].shape == () and state["bn.num_batches_tracked"] == 7
    np.testing.assert_array_equal(state["param"], np.full((2, 2), -1.5, np.float32))
    np.testing.assert_array_equal(state["shared.a"], np.arange(2, 6) * 0.5)
    np.testing.assert_array_equal(state["shared.b"], np.arange(5, 10) * 0.5)
    assert state["empty"].shape == (0, 3)
    state["param"][0, 0] = 3.0  # the arrays are the caller's own


def test_refuses_a_checkpoint_that_names_other_globals(tmp_path):
    path = tmp_path / "evil.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"x": Path.cwd}))
    with pytest.raises(TorchCheckpointError, match="refused"):
        read_torch_state_dict(path)
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(TorchCheckpointError, match="neither a zip nor"):
        read_torch_state_dict(junk)
    with pytest.raises(FileNotFoundError):
        read_torch_state_dict(tmp_path / "missing.pt")


# ------------------------------------------------------------ the ResNet-18 converter

CHANNELS = (8, 8, 16, 32)  # SiamResNet18(width=0.125)


def _random_state(rng) -> OrderedDict:
    return random_resnet18_state(rng, CHANNELS)


def _conv(x, w, stride, pad, dil):
    """NHWC float64 convolution with a PyTorch (out, in, kh, kw) kernel."""
    n, h, wd, _ = x.shape
    k = w.shape[-1]
    xp = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    ho = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    wo = (wd + 2 * pad - dil * (k - 1) - 1) // stride + 1
    out = np.zeros((n, ho, wo, w.shape[0]))
    for i in range(k):
        for j in range(k):
            patch = xp[:, i * dil:i * dil + stride * (ho - 1) + 1:stride,
                       j * dil:j * dil + stride * (wo - 1) + 1:stride]
            out += patch @ w[:, :, i, j].T.astype(np.float64)
    return out


class _Bound:
    """A float64 forward carrying, per value, a bound on its float32 evaluation's error
    (a running error analysis, as tests/tolerances.toy_mlp_atol; used up to conv1, the
    bound is carried further but grows too fast to be useful): a convolution of n
    products adds float32_sum_atol(n, |w| conv |x|) to |w| conv (the incoming bound);
    batch norm scales the bound by |gamma| / sqrt(var + eps) and adds a few roundings;
    ReLU and max-pooling are 1-Lipschitz; a residual sum adds one rounding."""

    def __init__(self, state):
        self.s = state

    def conv(self, x, e, name, stride, pad, dil=1):
        w = self.s[f"{name}.weight"].astype(np.float64)
        n = w.shape[1] * w.shape[2] * w.shape[3]
        y = _conv(x, w, stride, pad, dil)
        terms = _conv(np.abs(x), np.abs(w), stride, pad, dil)
        return y, _conv(e, np.abs(w), stride, pad, dil) + float32_sum_atol(n, terms)

    def bn(self, x, e, name):
        s = self.s
        g = s[f"{name}.weight"] / np.sqrt(s[f"{name}.running_var"].astype(np.float64) + 1e-5)
        y = (x - s[f"{name}.running_mean"]) * g + s[f"{name}.bias"]
        return y, e * np.abs(g) + 4 * EPS32 * (np.abs(x) * np.abs(g) + np.abs(y) + 1.0)

    def block(self, x, e, p, stride, dil, proj):
        y, ey = self.conv(x, e, f"{p}.conv1", stride, dil, dil)
        y, ey = self.bn(y, ey, f"{p}.bn1")
        y, ey = np.maximum(y, 0), ey
        y, ey = self.conv(y, ey, f"{p}.conv2", 1, dil, dil)
        y, ey = self.bn(y, ey, f"{p}.bn2")
        if proj:
            sk, es = self.conv(x, e, f"{p}.downsample.0", stride, 0)
            sk, es = self.bn(sk, es, f"{p}.downsample.1")
        else:
            sk, es = x, e
        out = y + sk
        return np.maximum(out, 0), ey + es + EPS32 * np.abs(out)


def _max_pool(x):
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
    ho = (x.shape[1] + 2 - 3) // 2 + 1
    wo = (x.shape[2] + 2 - 3) // 2 + 1
    return np.max([xp[:, i:i + 2 * (ho - 1) + 1:2, j:j + 2 * (wo - 1) + 1:2]
                   for i in range(3) for j in range(3)], axis=0)


@pytest.mark.heavy
def test_torchvision_weights_give_the_numpy_forward_of_the_same_weights():
    rng = np.random.default_rng(0)
    state = _random_state(rng)
    model = SiamResNet18(width=0.125, rngs=nnx.Rngs(0))
    unused = load_torchvision_resnet18(model, state)
    assert unused and all(k.startswith(("layer4.", "fc.")) for k in unused)
    model.eval()
    image = rng.uniform(0, 255, (1, 40, 40, 3)).astype(np.float32)
    c1, l3 = (np.asarray(f) for f in model.features(image, (0, 3)))

    f = _Bound(state)
    mean = np.asarray(IMAGENET_MEAN) * 255
    std = np.asarray(IMAGENET_STD) * 255
    x = (image.astype(np.float64) - mean) / std
    e = 2 * EPS32 * np.abs(x)  # the subtraction and the division, rounded
    x, e = f.conv(x, e, "conv1", 2, 3)
    x, e = f.bn(x, e, "bn1")
    x = np.maximum(x, 0)
    assert_within(c1, x, e)
    x, e = _max_pool(x), _max_pool(e)
    for layer, stride, dil in ((1, 1, 1), (2, 2, 1), (3, 1, 2)):
        for i in range(2):
            p = f"layer{layer}.{i}"
            x, e = f.block(x, e, p, stride if i == 0 else 1, dil,
                           proj=f"{p}.downsample.0.weight" in state)
    assert l3.shape == x.shape == (1, 5, 5, 32)
    # Through 13 convolutions the worst-case bound is useless (it grows about x20 per
    # convolution: 5e7 times the values here), so layer3 is held to 1e-4 of its largest
    # value. Measured: 6.1e-7 under the default (AVX-512) and AVX2 kernels, 5.0e-7 under
    # SSE4_2, 1/165 of the tolerance; a transposed or misplaced kernel moves it to O(1)
    gap = np.abs(l3 - x).max() / np.abs(x).max()
    assert gap < 1e-4, gap


def test_a_checkpoint_that_does_not_fit_names_the_key():
    state = _random_state(np.random.default_rng(1))
    with pytest.raises(TorchCheckpointError, match=r"conv1.weight.*width=1.0"):
        load_torchvision_resnet18(SiamResNet18(width=0.25, rngs=nnx.Rngs(0)), state)
    del state["layer2.0.bn1.running_var"]
    with pytest.raises(TorchCheckpointError, match="layer2.0.bn1.running_var"):
        load_torchvision_resnet18(SiamResNet18(width=0.125, rngs=nnx.Rngs(0)), state)
    with pytest.raises(TorchCheckpointError, match="not a torchvision ResNet-18"):
        load_torchvision_resnet18(SiamResNet18(width=0.125, rngs=nnx.Rngs(0)), {})


def test_a_state_dict_nested_under_state_dict_is_read(tmp_path):
    # some checkpoints hold {"state_dict": ...}; written here in the zip layout by hand
    buf = io.BytesIO()
    pickle.dump({"state_dict": OrderedDict()}, buf, protocol=2)
    path = tmp_path / "nested.pt"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("nested/data.pkl", buf.getvalue())
    assert read_torch_state_dict(path) == {}


def test_the_test_writer_round_trips_a_state_dict(tmp_path):
    """tests/models/torch_files.write_torch_zip (which the recipe tests use for
    --config.pretrained) writes what the reader reads back bit for bit."""
    from tests.models.torch_files import write_torch_zip

    state = _random_state(np.random.default_rng(3))
    write_torch_zip(tmp_path / "r18.pth", state)
    back = read_torch_state_dict(tmp_path / "r18.pth")
    assert list(back) == list(state)
    for k, v in state.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        np.testing.assert_array_equal(back[k], v)
