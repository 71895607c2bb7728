"""The sparse-box experiment's label sets: every true box, the sparse key frames' boxes
alone (moved to the first frame in view), and the pseudo boxes, with NaN elsewhere."""

import numpy as np
import pytest

from ebm_jax.data.sequences import Sequence
from ebm_jax.recipes.tracking.sparse_boxes import labelled_sequences


def _seq(name, n=7, absent=()):
    boxes = np.tile([10.0, 12.0, 8.0, 6.0], (n, 1)) + np.arange(n)[:, None] * [1, 0, 0, 0]
    flags = np.zeros(n, bool)
    flags[list(absent)] = True
    boxes[flags] = np.nan
    return Sequence(name=name, frames=tuple(f"{name}/{i}.jpg" for i in range(n)),
                    boxes=boxes, image_size=(40, 60), absent=flags)


def test_keys_are_in_view_with_the_box_centre_on_the_frame():
    seq = _seq("c")
    absent = np.zeros(7, bool)
    absent[3] = True  # out of view, its box left where the target went (off the frame)
    seq = Sequence(name="c", frames=seq.frames, boxes=seq.boxes.copy(), image_size=(40, 60),
                   absent=absent)
    seq.boxes[3] = [200.0, -50.0, 8.0, 6.0]
    seq.boxes[6] = [-5.0, 12.0, 8.0, 6.0]  # in view, but its centre is off the frame
    sparse = labelled_sequences([seq], "sparse", every=3)[0]
    # block [6, 7) has no frame to start from: no key there
    assert np.flatnonzero(np.isfinite(sparse.boxes).all(1)).tolist() == [0, 4]


def test_the_three_label_sets():
    seqs = [_seq("a"), _seq("b", absent=(0, 1))]
    same = labelled_sequences(seqs, "all", every=3)
    assert same[0] is seqs[0] and same[1] is seqs[1]
    sparse = labelled_sequences(seqs, "sparse", every=3)
    kept = [np.flatnonzero(np.isfinite(s.boxes).all(1)).tolist() for s in sparse]
    # keys at 0, 3, 6; in "b" the first block's key moves to frame 2, the first in view
    assert kept == [[0, 3, 6], [2, 3, 6]]
    np.testing.assert_array_equal(sparse[1].boxes[2], seqs[1].boxes[2])
    pseudo = {1: {"boxes": np.full((7, 4), 5.0)}}
    out = labelled_sequences(seqs, "pseudo", every=3, pseudo=pseudo)
    assert len(out) == 1 and out[0].name == "b"  # "a" has no pseudo boxes: left out
    assert np.all(out[0].boxes == 5.0)
    with pytest.raises(ValueError, match="labels must be one of"):
        labelled_sequences(seqs, "dense", every=3)
