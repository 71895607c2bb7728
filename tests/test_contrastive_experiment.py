"""Image data readers, the end-to-end mechanism and the `ebm-jax moco / instdisc`
experiments at smoke size."""

import dataclasses
import json
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from ebm_jax.cli import main as cli_main
from ebm_jax.contrastive import (
    QUERY_PARAMS,
    InstDisc,
    MoCo,
    end_to_end_loss,
    make_instdisc_loss,
    make_moco_loss,
)
from ebm_jax.data import images as image_data
from ebm_jax.data.augment import digits_augment
from ebm_jax.experiments import contrastive as c
from ebm_jax.models.resnet import ResNetEncoder
from ebm_jax.train import (
    CheckpointError,
    create_train_state,
    make_mesh,
    make_train_step,
    replicate,
)

# ------------------------------------------------------------------------ data


def test_digits_are_real_images_split_by_class():
    d = image_data.load_digits(16)
    assert d.train_images.shape == (1348, 16, 16, 1) or d.train_images.shape[1:] == (16, 16, 1)
    assert len(d.train_images) + len(d.test_images) == 1797
    assert d.train_images.dtype == np.float32
    assert 0.0 <= d.train_images.min() and d.train_images.max() <= 1.0
    assert d.train_images.max() > 0.9  # ink, not an empty canvas
    assert set(np.unique(d.train_labels)) == set(range(10))
    # stratified: every class is ~25% test
    for k in range(10):
        frac = np.mean(d.test_labels == k) / np.mean(
            np.concatenate([d.train_labels, d.test_labels]) == k) * len(d.test_labels) / 1797
        assert 0.2 < frac < 0.3


def test_check_images_and_labels_name_the_problem():
    with pytest.raises(ValueError, match=r"images must have shape \(N, H, W, C\)"):
        image_data.check_images(np.zeros((4, 8, 8)))
    with pytest.raises(ValueError, match="1 or 3 channels"):
        image_data.check_images(np.zeros((4, 8, 8, 2), np.float32))
    with pytest.raises(ValueError, match=r"in \[0, 1\]"):
        image_data.check_images(np.full((4, 8, 8, 1), 255.0, np.float32))
    with pytest.raises(ValueError, match="floating point"):
        image_data.check_images(np.zeros((4, 8, 8, 1), np.uint8))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 10\), got range \[0, 10\]"):
        image_data.check_labels(np.array([0, 10]), 10)


def test_cifar10_reader(tmp_path):
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (4, 3072), dtype=np.uint8)
        with open(root / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": list(rng.integers(0, 10, 4))}, f)
    d = image_data.load_cifar10(tmp_path)
    assert d.train_images.shape == (20, 32, 32, 3) and d.test_images.shape == (4, 32, 32, 3)
    # channel-major rows become HWC: pixel (0, 0) of image 0 is bytes 0, 1024, 2048
    with open(root / "data_batch_1", "rb") as f:
        raw = pickle.load(f)[b"data"][0]
    np.testing.assert_allclose(d.train_images[0, 0, 0], raw[[0, 1024, 2048]] / 255.0)
    with pytest.raises(FileNotFoundError, match="data_batch_1"):
        image_data.load_cifar10(tmp_path / "nowhere")


def test_image_folder_reader(tmp_path):
    from PIL import Image

    for split, n in (("train", 3), ("val", 2)):
        for cls, value in (("cat", 40), ("dog", 200)):
            folder = tmp_path / split / cls
            folder.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(np.full((20, 30, 3), value, np.uint8)).save(folder / f"{i}.png")
    d = image_data.load_image_folder(tmp_path, 8)
    assert d.class_names == ("cat", "dog")
    assert d.train_images.shape == (6, 8, 8, 3) and d.test_images.shape == (4, 8, 8, 3)
    for x, y in zip(d.train_images, d.train_labels):
        np.testing.assert_allclose(x, (40 if y == 0 else 200) / 255.0, atol=1e-6)


def test_opencv_digits_sheet(tmp_path):
    import matplotlib.image as mpimg

    sheet = np.zeros((1000, 2000), np.float32)
    for k in range(10):  # class k: rows 5k..5k+4 of 20x20 cells, brightness by class
        sheet[100 * k:100 * (k + 1)] = k / 10
    path = tmp_path / "digits.png"
    mpimg.imsave(path, sheet, cmap="gray", vmin=0, vmax=1)
    d = image_data.load_opencv_digits(path, 20)
    assert len(d.train_images) + len(d.test_images) == 5000
    for x, y in zip(d.test_images[:50], d.test_labels[:50]):
        np.testing.assert_allclose(x.mean(), y / 10, atol=0.01)


def test_few_label_indices():
    labels = np.repeat(np.arange(3), 20)
    idx = c.few_label_indices(labels, 3, 5, seed=0)
    assert np.bincount(labels[idx]).tolist() == [5, 5, 5]
    with pytest.raises(ValueError, match="few_labels 25"):
        c.few_label_indices(labels, 3, 25, seed=0)


def test_digits_augment_keeps_range_and_differs_per_key():
    x = jnp.asarray(image_data.load_digits(16).train_images[0])
    a = digits_augment(jax.random.key(0), x, 16)
    b = digits_augment(jax.random.key(1), x, 16)
    assert a.shape == (16, 16, 1) and 0 <= float(a.min()) and float(a.max()) <= 1
    assert not np.allclose(a, b)


# ------------------------------------------------------------------------ mechanisms


def test_end_to_end_loss_equals_numpy():
    rng = np.random.default_rng(0)
    q = rng.normal(size=(6, 4))
    k = rng.normal(size=(6, 4))
    logits = q @ k.T / 0.2
    m = logits.max(1, keepdims=True)
    want = np.mean(np.log(np.exp(logits - m).sum(1)) + m[:, 0] - np.diag(logits))
    np.testing.assert_allclose(end_to_end_loss(jnp.asarray(q), jnp.asarray(k), 0.2), want,
                               rtol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        end_to_end_loss(jnp.asarray(q), jnp.asarray(k), 0.0)


def test_memory_bank_infonce_kind_equals_numpy():
    class Identity(nnx.Module):
        def __call__(self, x):
            return x / jnp.linalg.norm(x, axis=-1, keepdims=True)

    model = InstDisc(Identity(), num_items=10, dim=3, rngs=nnx.Rngs(0))
    bank = np.asarray(model.bank[...])
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    idx = np.array([4, 7])
    loss_fn = make_instdisc_loss(temperature=0.5, num_noise=5, kind="infonce")
    key = jax.random.key(3)
    loss, _ = loss_fn(model, (jnp.asarray(x), jnp.asarray(idx)), key)
    noise = np.asarray(jax.random.randint(jax.random.split(key)[1], (2, 5), 0, 10))
    f = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = []
    for i in range(2):
        s = bank[np.concatenate([[idx[i]], noise[i]])] @ f[i] / 0.5
        want.append(np.log(np.exp(s).sum()) - s[0])
    np.testing.assert_allclose(loss, np.mean(want), rtol=1e-5)


def _tiny_encoder(rngs, width=4, splits=1):
    return ResNetEncoder("resnet18", in_channels=1, small_images=True, head="linear",
                         dim=8, num_splits=splits, width=width, rngs=rngs)


def test_moco_state_donates_without_shared_buffers():
    """The key encoder starts as a copy of the query encoder in its own buffers, so the
    donated train step runs (XLA refuses to donate one buffer twice)."""
    model = MoCo(lambda r: _tiny_encoder(r, splits=2), queue_size=16, dim=8,
                 rngs=nnx.Rngs(0))
    q = jax.tree.leaves(nnx.state(model.query, nnx.Param))
    k = jax.tree.leaves(nnx.state(model.key_encoder, nnx.Param))
    for a, b in zip(q, k):
        np.testing.assert_array_equal(a, b)
        assert a.unsafe_buffer_pointer() != b.unsafe_buffer_pointer()
    opt = optax.sgd(0.01)
    graphdef, state = create_train_state(model, opt, jax.random.key(0),
                                         trainable=QUERY_PARAMS)
    loss = make_moco_loss(momentum=0.9, temperature=0.2, augment=digits_augment,
                          image_size=8)
    step = make_train_step(graphdef, loss, opt, make_mesh(1), trainable=QUERY_PARAMS,
                           donate=True)
    x = np.random.default_rng(0).random((8, 8, 8, 1), np.float32)
    state = replicate(state, make_mesh(1))  # as `fit` does: one compilation
    state, metrics = step(state, x)
    state, metrics = step(state, x)
    assert np.isfinite(float(metrics["loss"]))


# ------------------------------------------------------------------------ experiment

TINY = dataclasses.replace(
    c.PROFILES["quick"], width=4, image_size=8, dim=8, batch_size=32, epochs=1,
    queue_size=64, instdisc_noise=16, linear_epochs=3, knn_k=10, few_labels=2,
    momentum_values=(0.0, 0.99), queue_values=(32, 64))


@pytest.fixture(scope="module")
def tiny_data():
    return c.load_data(TINY, data="digits").subset(96, 40)


def test_experiment_writes_tables_and_resumes(tmp_path, tiny_data):
    mesh = make_mesh(1)
    kw = dict(run_dir=tmp_path / "runs", out=tmp_path / "out", mesh=mesh,
              progress=False, plot="pca", log=lambda s: None)
    payload = c.run_experiment("moco", TINY, tiny_data, **kw)
    assert [r["name"] for r in payload["tables"]["main"]] == [
        "random", "moco-m0.99-k64", "supervised"]
    for rows in payload["tables"].values():
        for r in rows:
            for k in ("linear_accuracy", "few_label_accuracy", "knn_accuracy"):
                assert 0.0 <= r[k] <= 1.0
    assert payload["tables"]["main"][1]["images_per_second"] is None or \
        payload["tables"]["main"][1]["images_per_second"] > 0
    out = tmp_path / "out"
    assert "Linear evaluation" in (out / "moco.md").read_text()
    assert json.loads((out / "moco.json").read_text())["tables"]["main"][0]["method"] == "random"
    assert (out / "moco_features.png").stat().st_size > 1000
    for stage in ("moco-m0.99-k64", "moco-m0.99-k64-linear", "supervised"):
        assert (tmp_path / "runs" / stage / "checkpoints").is_dir(), stage
    # a second call resumes: nothing retrains, the figures are the same
    again = c.run_experiment("moco", TINY, tiny_data, **kw)
    for a, b in zip(payload["tables"]["main"], again["tables"]["main"]):
        assert a["linear_accuracy"] == b["linear_accuracy"]
        assert a["final_loss"] == b["final_loss"]


@pytest.mark.slow
def test_ablation_tables(tmp_path, tiny_data):
    payload = c.run_experiment(
        "moco", TINY, tiny_data, run_dir=tmp_path / "runs", out=tmp_path / "out",
        mesh=make_mesh(1), ablations=c.ABLATIONS, progress=False, plot="none",
        log=lambda s: None)
    assert set(payload["tables"]) == {"main", "momentum", "mechanism", "queue"}
    assert [r["name"] for r in payload["tables"]["mechanism"]] == [
        "end-to-end", "memory-bank-k64", "moco-m0.99-k64"]
    assert [r["momentum"] for r in payload["tables"]["momentum"]] == [0.0, 0.99]
    assert [r["queue_size"] for r in payload["tables"]["queue"]] == [32, 64]
    md = (tmp_path / "out" / "moco.md").read_text()
    for text in ("Mechanism ablation", "end-to-end (K = 31)", "m = 0 ", "K = 32"):
        assert text in md, text


def test_instdisc_pretrain_and_checkpoint_of_another_architecture(tmp_path, tiny_data):
    mesh = make_mesh(1)
    spec = c.default_spec("instdisc", TINY)
    pre = c.pretrain(spec, TINY, tiny_data, run_dir=tmp_path, mesh=mesh, progress=False)
    assert np.isfinite(pre["final_loss"])
    enc = c.load_encoder(spec, TINY, tiny_data, run_dir=tmp_path)
    assert enc.width == 4
    wider = dataclasses.replace(TINY, width=8)
    with pytest.raises(CheckpointError, match="shape"):
        c.load_encoder(spec, wider, tiny_data, run_dir=tmp_path)


def test_run_checks_before_training(tiny_data):
    bad_k = c.RunSpec("moco", 0.99, 48)
    with pytest.raises(ValueError, match="queue size K must be divisible by the batch"):
        c.check_run(bad_k, TINY, tiny_data, 1)
    with pytest.raises(ValueError, match="momentum must be in"):
        c.RunSpec("moco", 1.5, 64)
    with pytest.raises(ValueError, match="divisible by --devices 3"):
        c.check_run(c.RunSpec("supervised"), TINY, tiny_data, 3)
    rgb = dataclasses.replace(tiny_data, train_images=np.repeat(tiny_data.train_images, 3, -1),
                              test_images=np.repeat(tiny_data.test_images, 3, -1))
    model = c.build_model(c.RunSpec("supervised"), TINY, rgb, seed=0)
    with pytest.raises(ValueError, match=r"images must have shape \(N, H, W, 3\)"):
        model.model.encoder(tiny_data.train_images[:2])


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    base = ["--run-dir", str(tmp_path / "r"), "--out", str(tmp_path / "o"), "--no-progress"]
    assert cli_main(["moco", "--momentum", "1.5", *base]) == 2
    assert "--momentum must be in [0, 1]" in capsys.readouterr().err
    assert cli_main(["moco", "--queue-size", "100", *base]) == 2
    assert "queue size K must be divisible by the batch size 64" in capsys.readouterr().err
    assert cli_main(["instdisc", "--data", "cifar10", *base]) == 2
    assert "needs --data-root" in capsys.readouterr().err
    assert cli_main(["moco", "--temperature", "0", *base]) == 2
    assert not (tmp_path / "r").exists() and not (tmp_path / "o").exists()


@pytest.mark.slow
def test_moco_pretrain_shuffles_batch_norm_across_devices(tmp_path, tiny_data):
    """With 2 devices MoCo runs its loss per device (shuffled BN across devices) and
    the run trains, checkpoints and evaluates like the one-device run."""
    mesh = make_mesh(2)
    spec = c.default_spec("moco", TINY)
    pre = c.pretrain(spec, TINY, tiny_data, run_dir=tmp_path, mesh=mesh, progress=False)
    assert np.isfinite(pre["final_loss"])
    ev = c.linear_eval(spec, TINY, tiny_data, run_dir=tmp_path, num_devices=2)
    assert 0.0 <= ev["linear_accuracy"] <= 1.0


def test_throughput_benchmark_times_a_step():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_contrastive", Path(__file__).parents[1] / "benchmarks" / "contrastive.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = bench.fake_data(TINY, 1, 64)
    row = bench.time_method(c.default_spec("instdisc", TINY), TINY, data, steps=2)
    assert row["images_per_second"] > 0 and row["steps_per_call"] == 1


class _TinyBNEncoder(nnx.Module):
    """Flatten -> Linear -> BatchNorm -> Linear -> L2 normalise: batch norm without a
    ResNet's compile time."""

    def __init__(self, rngs):
        self.fc1 = nnx.Linear(64, 16, rngs=rngs)
        self.bn = nnx.BatchNorm(16, rngs=rngs)
        self.fc2 = nnx.Linear(16, 8, rngs=rngs)

    def __call__(self, x):
        z = self.fc2(jax.nn.relu(self.bn(self.fc1(x.reshape(x.shape[0], -1)))))
        return z / jnp.linalg.norm(z, axis=-1, keepdims=True)


def test_moco_step_with_batch_norm_shuffled_across_devices():
    """Per-device MoCo step (shard_map): batch statistics averaged over the devices,
    the queue gathered as a replicated value, identical on every device."""
    from jax.sharding import PartitionSpec as P

    from ebm_jax.contrastive.moco import gather_replicated

    mesh = make_mesh(4)
    x = jnp.arange(8.0 * 3).reshape(8, 3)
    got = jax.jit(jax.shard_map(lambda a: gather_replicated(a, "data"), mesh=mesh,
                                in_specs=P("data"), out_specs=P()))(x)
    np.testing.assert_array_equal(got, x)

    model = MoCo(_TinyBNEncoder, queue_size=32, dim=8, rngs=nnx.Rngs(0))
    opt = optax.sgd(0.01)
    graphdef, state = create_train_state(model, opt, jax.random.key(0),
                                         trainable=QUERY_PARAMS)
    loss = make_moco_loss(momentum=0.9, temperature=0.2, augment=digits_augment,
                          image_size=8, shuffle="devices")
    step = make_train_step(graphdef, loss, opt, mesh, trainable=QUERY_PARAMS,
                           per_device=True, fold_device_key=False)
    state = replicate(state, mesh)
    images = np.random.default_rng(0).random((16, 8, 8, 1), np.float32)
    state, metrics = step(state, images)
    assert np.isfinite(float(metrics["loss"]))
    m = nnx.merge(graphdef, state.params, state.rest)
    assert int(m.pointer[...]) == 16
    assert not np.allclose(m.query.bn.mean[...], 0.0)  # statistics were updated
    for leaf in jax.tree.leaves(state.rest):  # one value on every device
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])
