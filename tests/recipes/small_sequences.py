"""Small GOT-10k-style sequences written into a test's tmp_path (JPEG frames,
groundtruth.txt, points.txt at the box centres), shared by the tracking recipe tests."""

import io

import numpy as np
from PIL import Image

from ebm_jax.data.sequences import read_got10k


def small_sequences(root, n=3, names=("a", "b")):
    for name in names:
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(n):
            buf = io.BytesIO()
            Image.new("RGB", (32, 24), (40 * i, 90, 200)).save(buf, "JPEG")
            (folder / f"{i + 1:08d}.jpg").write_bytes(buf.getvalue())
        boxes = np.array([[2 + i, 3, 10, 8] for i in range(n)], float)
        (folder / "groundtruth.txt").write_text(
            "".join(",".join(f"{v:g}" for v in b) + "\n" for b in boxes))
        centres = boxes[:, :2] + (boxes[:, 2:] - 1) / 2
        (folder / "points.txt").write_text("".join(f"{x},{y}\n" for x, y in centres))
    return read_got10k(root)
