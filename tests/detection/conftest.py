"""A small COCO-format set of white images for the detection tests."""

import pytest

from ebm_jax.data.detection import load_detection_set


@pytest.fixture
def coco_set(coco_folder):
    """`coco_set(sizes, image_size)`: images of (w, h) `sizes`, one box (category 7, the
    second of the categories 3 and 7) in image 1, letterboxed to `image_size`."""

    def make(sizes, image_size):
        anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8],
                 "iscrowd": 0}]
        path = coco_folder(anns, sizes)
        return load_detection_set(path, path.parent / "img", image_size=image_size)

    return make
