"""A labelled image set (`ImageData`: float32 images (N, H, W, C) in [0, 1], int32
labels in [0, num_classes), a train and a test split), its checks and the stratified
split, shared by the loaders of `ebm_jax.data.images`, the generated
`ebm_jax.data.digits_on_photos` and the records reader `ebm_jax.data.records`."""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["ImageData", "check_images", "check_labels", "stratified_split"]


@dataclasses.dataclass(frozen=True)
class ImageData:
    name: str
    train_images: np.ndarray
    train_labels: np.ndarray
    test_images: np.ndarray
    test_labels: np.ndarray
    num_classes: int
    class_names: tuple[str, ...] = ()
    # read from ArrayRecord records (`data.records`): their directory, and the record
    # index of each training image (a grain pipeline reads the same images from there)
    records: str | None = None
    train_index: np.ndarray | None = None

    def __post_init__(self):
        for split in ("train", "test"):
            images = getattr(self, f"{split}_images")
            labels = getattr(self, f"{split}_labels")
            check_images(images, name=f"{self.name} {split}_images")
            check_labels(labels, self.num_classes, name=f"{self.name} {split}_labels")
            if len(images) != len(labels):
                raise ValueError(f"{self.name}: {len(images)} {split} images but "
                                 f"{len(labels)} labels")
        if self.train_index is not None and len(self.train_index) != len(self.train_images):
            raise ValueError(f"{self.name}: {len(self.train_index)} train_index entries "
                             f"but {len(self.train_images)} training images")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_images.shape[1:])

    def subset(self, num_train: int | None = None, num_test: int | None = None):
        """The first examples of each split (the splits are already shuffled)."""
        return dataclasses.replace(
            self,
            train_images=self.train_images[:num_train],
            train_labels=self.train_labels[:num_train],
            train_index=None if self.train_index is None else self.train_index[:num_train],
            test_images=self.test_images[:num_test],
            test_labels=self.test_labels[:num_test],
        )


def check_images(images, *, channels: int | None = None, name: str = "images") -> None:
    """images: (N, H, W, C) with C in {1, 3} (or `channels`), N >= 1, finite values in
    [0, 1]."""
    shape = np.shape(images)
    if len(shape) != 4:
        raise ValueError(f"{name} must have shape (N, H, W, C), got shape {shape}")
    allowed = (1, 3) if channels is None else (channels,)
    if shape[-1] not in allowed:
        raise ValueError(f"{name} must have {' or '.join(map(str, allowed))} channels "
                         f"(last axis), got shape {shape}")
    if shape[0] < 1:
        raise ValueError(f"{name} is empty")
    a = np.asarray(images)
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"{name} must be floating point in [0, 1], got dtype {a.dtype}")
    lo, hi = float(np.min(a)), float(np.max(a))
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo < 0.0 or hi > 1.0:
        raise ValueError(f"{name} values must be finite and in [0, 1], got range "
                         f"[{lo}, {hi}]")


def check_labels(labels, num_classes: int, *, name: str = "labels") -> None:
    """labels: 1-D integers in [0, num_classes)."""
    a = np.asarray(labels)
    if a.ndim != 1 or not np.issubdtype(a.dtype, np.integer):
        raise ValueError(f"{name} must be a 1-D integer array, got shape {a.shape} "
                         f"dtype {a.dtype}")
    if a.size and (int(a.min()) < 0 or int(a.max()) >= num_classes):
        raise ValueError(f"{name} must be in [0, {num_classes}), got range "
                         f"[{int(a.min())}, {int(a.max())}]")


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int):
    """(train indices, test indices): per class, a `test_fraction` of its examples
    (rounded) drawn by `seed` go to test; both index arrays shuffled."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(test_fraction * len(idx)))
        test.append(idx[:k])
        train.append(idx[k:])
    return rng.permutation(np.concatenate(train)), rng.permutation(np.concatenate(test))
