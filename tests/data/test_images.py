"""The labelled image datasets of the contrastive experiments: readers, checks, the
loader by name, sizes known before reading, the fingerprint."""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.data import images as image_data
from ebm_jax.ops.augment import digits_augment


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
            pickle.dump({b"data": data, b"labels": rng.integers(0, 10, 4).tolist()}, f)
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


def test_digits_augment_keeps_range_and_differs_per_key():
    x = jnp.asarray(image_data.load_digits(16).train_images[0])
    a = digits_augment(jax.random.key(0), x, 16)
    b = digits_augment(jax.random.key(1), x, 16)
    assert a.shape == (16, 16, 1) and 0 <= float(a.min()) and float(a.max()) <= 1
    assert not np.allclose(a, b)


def test_load_by_name_sizes_and_fingerprint(tmp_path):
    d = image_data.load_image_data("digits", 8, seed=3)
    assert image_data.dataset_sizes("digits") == (len(d.train_images),
                                                  len(d.test_images), 1)
    small = image_data.load_image_data("digits", 8, seed=3, num_train=20, num_test=5)
    assert len(small.train_images) == 20 and len(small.test_images) == 5
    np.testing.assert_array_equal(small.train_images, d.train_images[:20])
    other = image_data.load_image_data("digits", 8, seed=4)
    assert image_data.fingerprint(d) == image_data.fingerprint(
        image_data.load_image_data("digits", 8, seed=3))
    assert image_data.fingerprint(d) != image_data.fingerprint(other)
    assert image_data.fingerprint(d) != image_data.fingerprint(small)
    with pytest.raises(ValueError, match="data cifar10 needs data_root"):
        image_data.load_image_data("cifar10", 32)
    with pytest.raises(ValueError, match="data must be one of"):
        image_data.load_image_data("mnist", 8)
    for split, n in (("train", 3), ("val", 2)):
        folder = tmp_path / split / "cat"
        folder.mkdir(parents=True)
        for i in range(n):
            (folder / f"{i}.png").write_bytes(b"")
    assert image_data.dataset_sizes("folder", tmp_path) == (3, 2, 3)
