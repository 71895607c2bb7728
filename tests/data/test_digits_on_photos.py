"""The digits-on-photos benchmark: its splits, its blend, its determinism, and that raw
pixels do not solve it (the point of it)."""

import numpy as np
import pytest

from ebm_jax.data.digits_on_photos import composite, load_digits_on_photos
from ebm_jax.data.images import dataset_sizes, load_image_data, validation_split


@pytest.fixture(scope="module")
def data():
    return load_digits_on_photos(16, seed=0)


def test_splits_sizes_and_labels(data):
    assert data.train_images.shape == (2 * 1347, 16, 16, 3)
    assert data.test_images.shape == (4 * 450, 16, 16, 3)
    assert dataset_sizes("digits-on-photos")[:2] == (2 * 1347, 4 * 450)
    assert np.bincount(data.test_labels).min() >= 4 * 44  # stratified: 44-46 per class
    assert 0.0 <= data.train_images.min() and data.train_images.max() <= 1.0
    # colour photos: the channels differ
    assert np.abs(data.train_images[..., 0] - data.train_images[..., 1]).mean() > 0.01


def test_blend_is_the_mnist_m_difference():
    rng = np.random.default_rng(0)
    photo = rng.uniform(size=(40, 50, 3)).astype(np.float32)
    blank, _ = composite(np.zeros((1, 8, 8)), [photo], 16, 1, np.random.default_rng(1))
    full, _ = composite(np.ones((1, 8, 8)), [photo], 16, 1, np.random.default_rng(1))
    # the same patch (the same draws); a full stroke inverts it inside the digit's box
    # (at least 60% of the side) and leaves it alone outside
    inverted = np.isclose(full[0], 1.0 - blank[0], atol=1e-5).all(-1)
    kept = np.isclose(full[0], blank[0], atol=1e-5).all(-1)
    assert (inverted | kept).all()
    assert (~kept).mean() >= 0.6**2 - 0.05


def test_a_seed_gives_the_same_bytes():
    a = load_digits_on_photos(16, seed=3, train_copies=1, test_copies=1)
    b = load_digits_on_photos(16, seed=3, train_copies=1, test_copies=1)
    c = load_digits_on_photos(16, seed=4, train_copies=1, test_copies=1)
    assert np.array_equal(a.train_images, b.train_images)
    assert np.array_equal(a.test_labels, b.test_labels)
    assert not np.array_equal(a.train_images, c.train_images)


def test_validation_split_holds_out_training_digits_not_test_ones():
    val = load_image_data("digits-on-photos", 16, seed=0, split="val")
    n_val = val.test_images.shape[0] // 4  # 15% of each class of the 1347 training digits
    assert val.test_images.shape[0] == 4 * n_val and 195 <= n_val <= 209
    assert val.train_images.shape[0] == 2 * (1347 - n_val)
    assert val.name.endswith("(val)")
    plain = load_image_data("digits", 8, seed=0)
    held = validation_split(plain, 0.15, seed=0)
    assert len(held.train_labels) + len(held.test_labels) == len(plain.train_labels)
    assert len(held.test_labels) == n_val  # the same stratified rule
    # the held-out examples are training examples, never test ones
    train_rows = {r.tobytes() for r in plain.train_images}
    assert all(r.tobytes() in train_rows for r in held.test_images)
    with pytest.raises(ValueError, match="split must be 'test' or 'val'"):
        load_image_data("digits", 8, split="train")
    with pytest.raises(ValueError, match=r"validation fraction must be in \(0, 1\)"):
        validation_split(plain, 1.0, seed=0)


def test_raw_pixels_do_not_solve_it(data):
    """Raw pixels separate plain digits (kNN ~ 98%); on photos they fall below 60%."""
    from sklearn.neighbors import KNeighborsClassifier

    def knn(d):
        x = d.train_images.reshape(len(d.train_images), -1)
        xt = d.test_images.reshape(len(d.test_images), -1)
        return KNeighborsClassifier(20).fit(x, d.train_labels).score(xt, d.test_labels)

    assert knn(load_image_data("digits", 16, seed=0)) > 0.9
    assert knn(data) < 0.6
