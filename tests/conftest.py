import os

# Tests run on the CPU; keep XLA from grabbing every core of a small CI machine twice.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Four fake CPU devices for the data-parallel tests (must be set before JAX starts).
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "4")


import importlib.util  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="module")
def toy():
    """The toy recipe of tests/train/toy_recipe.py (a recipe module the runner accepts:
    `check`, `run`, `Config`), imported afresh for each test module as `toy_recipe`."""
    path = Path(__file__).parent / "train" / "toy_recipe.py"
    spec = importlib.util.spec_from_file_location("toy_recipe", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["toy_recipe"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shapes_dataset(tmp_path_factory):
    """The generated detection benchmark, 12 images of 64 px (shared by the data and
    eval tests)."""
    from ebm_jax.data import detection as det

    return det.generate_dataset(tmp_path_factory.mktemp("shapes"), num_images=12,
                                image_size=64, num_classes=3, min_size=8,
                                annotation_noise=0.1, seed=0)


@pytest.fixture
def coco_folder(tmp_path):
    """`coco_folder(annotations, sizes)`: white PNG images of (w, h) `sizes` (ids 1, 2,
    ...) under tmp_path/img and their COCO annotation file (categories 3 and 7);
    returns the annotation file's path."""

    def make(annotations, sizes=((40, 20),)):
        import numpy as np
        from PIL import Image

        (tmp_path / "img").mkdir()
        images = []
        for i, (w, h) in enumerate(sizes, 1):
            Image.fromarray(np.full((h, w, 3), 255, np.uint8)).save(
                tmp_path / "img" / f"{i}.png")
            images.append({"id": i, "file_name": f"{i}.png", "width": w, "height": h})
        path = tmp_path / "ann.json"
        path.write_text(json.dumps({"images": images, "annotations": annotations,
                                    "categories": [{"id": 3, "name": "a"},
                                                   {"id": 7, "name": "b"}]}))
        return path

    return make
