"""A small COCO-format set of white images for the detection tests."""

import json

import numpy as np
import pytest
from PIL import Image

from ebm_jax.data.detection import load_detection_set


@pytest.fixture
def coco_set(tmp_path):
    """`coco_set(sizes, image_size)`: images of (w, h) `sizes`, one box (category 7, the
    second of the categories 3 and 7) in image 1, letterboxed to `image_size`."""

    def make(sizes, image_size):
        (tmp_path / "img").mkdir()
        images = []
        for i, (w, h) in enumerate(sizes, 1):
            Image.fromarray(np.full((h, w, 3), 255, np.uint8)).save(
                tmp_path / "img" / f"{i}.png")
            images.append({"id": i, "file_name": f"{i}.png", "width": w, "height": h})
        anns = [{"id": 1, "image_id": 1, "category_id": 7, "bbox": [4, 2, 10, 8],
                 "iscrowd": 0}]
        path = tmp_path / "ann.json"
        path.write_text(json.dumps({"images": images, "annotations": anns,
                                    "categories": [{"id": 3, "name": "a"},
                                                   {"id": 7, "name": "b"}]}))
        return load_detection_set(path, tmp_path / "img", image_size=image_size)

    return make
