"""GOT-10k and OTB readers: small folders built in tmp_path, read back, and every bad
input rejected at opening with a message naming the sequence, frame and rule."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from ebm_jax.data.sequences import SequenceError, read_got10k, read_otb

H, W = 24, 32


def colour(i: int) -> tuple[int, int, int]:
    return (40 * i % 256, 200 - 30 * i, 90)


def jpeg_bytes(i: int, size=(H, W), mode="RGB") -> bytes:
    buffer = io.BytesIO()
    value = colour(i) if mode == "RGB" else colour(i)[0]
    Image.new(mode, (size[1], size[0]), value).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def write_lines(path, rows, fmt="%g", sep=","):
    path.write_text("".join(sep.join(fmt % v for v in np.atleast_1d(r)) + "\n"
                            for r in rows))


def make_got10k_sequence(folder, n=3, boxes=None, labels=True):
    folder.mkdir(parents=True)
    for i in range(n):
        (folder / f"{i + 1:08d}.jpg").write_bytes(jpeg_bytes(i))
    boxes = np.array([[2 + i, 3, 10, 8] for i in range(n)], float) if boxes is None \
        else np.asarray(boxes, float)
    write_lines(folder / "groundtruth.txt", boxes, "%.4f")
    if labels:
        write_lines(folder / "absence.label", np.zeros(n, int), "%d")
        write_lines(folder / "cover.label", np.full(n, 8), "%d")
        write_lines(folder / "visible_ratio.txt", np.ones(n), "%.4f")
        centres = boxes[:, :2] + (boxes[:, 2:] - 1) / 2
        write_lines(folder / "points.txt", centres, "%.4f")
        write_lines(folder / "noisy_points.txt", centres + 1, "%.4f")
    return folder


def make_got10k(root, names=("a", "b"), with_list=True, **kwargs):
    for name in names:
        make_got10k_sequence(root / name, **kwargs)
    if with_list:
        (root / "list.txt").write_text("".join(n + "\n" for n in names))
    return root


def test_got10k_reads_back_boxes_labels_points_and_frames(tmp_path):
    root = make_got10k(tmp_path / "val")
    seqs = read_got10k(tmp_path, split="val", verify="full")
    assert [s.name for s in seqs] == ["a", "b"]
    s = seqs[0]
    assert len(s) == 3 and s.image_size == (H, W)
    assert s.frames[1] == str(root / "a" / "00000002.jpg")
    np.testing.assert_array_equal(s.boxes, [[2, 3, 10, 8], [3, 3, 10, 8], [4, 3, 10, 8]])
    assert s.boxes.dtype == np.float64
    assert not s.absent.any() and s.visible.all() and (s.cover == 8).all()
    np.testing.assert_allclose(s.points[0], [2 + 4.5, 3 + 3.5])
    np.testing.assert_allclose(s.noisy_points - s.points, 1.0)
    np.testing.assert_array_equal(s.visible_ratio, 1.0)
    frame = s.read_frame(2)
    assert frame.dtype == np.uint8 and frame.shape == (H, W, 3)
    np.testing.assert_allclose(frame.reshape(-1, 3).mean(0), colour(2), atol=2)
    np.testing.assert_array_equal(s.sparse_box_frames(2), [0, 2])
    np.testing.assert_array_equal(s.sparse_box_frames(5), [0])
    # no list.txt: the sorted sub-directories holding a groundtruth.txt
    (root / "list.txt").unlink()
    (root / "notes").mkdir()
    assert [s.name for s in read_got10k(root)] == ["a", "b"]
    assert [s.name for s in read_got10k(root, sequences=["b"])] == ["b"]


def test_got10k_greyscale_frames_and_tilde_paths(tmp_path, monkeypatch):
    folder = make_got10k_sequence(tmp_path / "data" / "g", labels=False)
    (folder / "00000002.jpg").write_bytes(jpeg_bytes(5, mode="L"))
    monkeypatch.setenv("HOME", str(tmp_path))
    (s,) = read_got10k("~/data")
    frame = s.read_frame(1)
    assert frame.shape == (H, W, 3)
    np.testing.assert_array_equal(frame[..., 0], frame[..., 2])
    np.testing.assert_allclose(frame.mean(), colour(5)[0], atol=2)
    assert s.cover is None and s.points is None and not s.absent.any()
    assert s.visible.all()


def test_got10k_absent_frames_keep_nan_boxes(tmp_path):
    folder = make_got10k_sequence(tmp_path / "a", n=4, labels=False,
                                  boxes=[[1, 1, 5, 5], [np.nan] * 4, [1, 1, 0, 5],
                                         [1, 1, 5, 5]])
    write_lines(folder / "absence.label", [0, 1, 0, 0], "%d")
    write_lines(folder / "cover.label", [8, 0, 0, 3], "%d")
    (s,) = read_got10k(tmp_path)
    assert np.isnan(s.boxes[1]).all() and np.isnan(s.boxes[2]).all()
    np.testing.assert_array_equal(s.absent, [False, True, False, False])
    np.testing.assert_array_equal(s.visible, [True, False, False, True])


def test_got10k_test_split_first_box_only(tmp_path):
    folder = make_got10k_sequence(tmp_path / "test" / "t1", n=4, labels=False,
                                  boxes=[[3, 4, 10, 6]])
    (tmp_path / "test" / "list.txt").write_text("t1\n")
    (s,) = read_got10k(tmp_path, split="test", boxes="first")
    np.testing.assert_array_equal(s.boxes[0], [3, 4, 10, 6])
    assert np.isnan(s.boxes[1:]).all() and len(s) == 4
    with pytest.raises(SequenceError, match=r"'t1', frame 2: groundtruth.txt has 1 rows "
                                            r"but there are 4 frames; rule: one box"):
        read_got10k(tmp_path, split="test")
    write_lines(folder / "groundtruth.txt", [[0, 0, 0, 0]])
    with pytest.raises(SequenceError, match="'t1', frame 1.*first frame needs a valid box"):
        read_got10k(tmp_path, split="test", boxes="first")


BAD_BOXES = [
    ([[1, 1, 5, 5], [1, 1, 0, 5], [1, 1, 5, 5]], "frame 2"),
    ([[1, 1, 5, 5], [1, 1, 5, -2], [1, 1, 5, 5]], "frame 2"),
    ([[1, 1, 5, 5], [1, 1, 5, 5], [np.nan, 1, 5, 5]], "frame 3"),
    ([[1, 1, 5, 0], [1, 1, 5, 5], [1, 1, 5, 5]], "frame 1"),
]


@pytest.mark.parametrize("boxes, frame", BAD_BOXES)
def test_got10k_rejects_invalid_boxes(tmp_path, boxes, frame):
    make_got10k(tmp_path, names=["s1"], boxes=boxes)
    with pytest.raises(SequenceError, match=rf"{tmp_path}: sequence 's1', {frame} .*"
                                            r"rule: (boxes are finite|the first frame)"):
        read_got10k(tmp_path)


def test_first_frame_needs_a_box_even_when_absent(tmp_path):
    folder = make_got10k_sequence(tmp_path / "s1", labels=False,
                                  boxes=[[np.nan] * 4, [1, 1, 5, 5], [1, 1, 5, 5]])
    write_lines(folder / "absence.label", [1, 0, 0], "%d")
    with pytest.raises(SequenceError, match="'s1', frame 1 .*first frame needs"):
        read_got10k(tmp_path)


def test_got10k_rejects_bad_counts_gaps_and_rows(tmp_path):
    folder = make_got10k(tmp_path, names=["s1"], n=4) / "s1"
    write_lines(folder / "groundtruth.txt", [[1, 1, 5, 5]] * 3)
    with pytest.raises(SequenceError, match="'s1', frame 4: groundtruth.txt has 3 rows but "
                                            "there are 4 frames"):
        read_got10k(tmp_path)
    write_lines(folder / "groundtruth.txt", [[1, 1, 5, 5]] * 5)
    with pytest.raises(SequenceError, match=r"'s1', frame 5 \(00000005.jpg\): the frame "
                                            "file is missing"):
        read_got10k(tmp_path)
    write_lines(folder / "groundtruth.txt", [[1, 1, 5, 5]] * 4)
    (folder / "00000002.jpg").unlink()
    with pytest.raises(SequenceError, match="'s1', frame 2: the frame file is missing.*"
                                            "without gaps"):
        read_got10k(tmp_path)
    (folder / "00000002.jpg").write_bytes(jpeg_bytes(1))
    (folder / "groundtruth.txt").write_text("1,1,5,5\n1,1,abc,5\n1,1,5,5\n1,1,5,5\n")
    with pytest.raises(SequenceError,
                       match="'s1': groundtruth.txt line 2 .*does not parse"):
        read_got10k(tmp_path)
    (folder / "groundtruth.txt").write_text("1,1,5,5\n1,1,5\n1,1,5,5\n1,1,5,5\n")
    with pytest.raises(SequenceError, match="line 2 .*4 numbers per line"):
        read_got10k(tmp_path)


def test_got10k_rejects_label_files(tmp_path):
    folder = make_got10k(tmp_path, names=["s1"]) / "s1"
    write_lines(folder / "cover.label", [8, 8], "%d")
    with pytest.raises(SequenceError, match="'s1', frame 3: cover.label has 2 lines but "
                                            "the sequence has 3 frames"):
        read_got10k(tmp_path)
    write_lines(folder / "cover.label", [8, 9, 8], "%d")
    with pytest.raises(SequenceError, match=r"'s1', frame 2: cover.label line 2 .*"
                                            r"integers in \[0, 8\]"):
        read_got10k(tmp_path)
    write_lines(folder / "cover.label", [8, 8, 8], "%d")
    write_lines(folder / "points.txt", [[1, 2]] * 4)
    with pytest.raises(SequenceError, match="points.txt has 4 lines"):
        read_got10k(tmp_path)


def test_got10k_rejects_corrupt_and_mixed_size_frames(tmp_path):
    folder = make_got10k(tmp_path, names=["s1"]) / "s1"
    good = (folder / "00000002.jpg").read_bytes()
    (folder / "00000002.jpg").write_bytes(b"not an image at all" * 10)
    with pytest.raises(SequenceError, match=r"'s1', frame 2 \(.*00000002.jpg\): "
                                            "unreadable image header"):
        read_got10k(tmp_path)
    (s,) = read_got10k(tmp_path, verify="exists")  # not opened at this level
    with pytest.raises(SequenceError, match=r"'s1', frame 2 \(.*00000002.jpg\): cannot "
                                            "decode"):
        s.read_frame(1)
    noise = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, "JPEG", quality=95)
    (folder / "00000002.jpg").write_bytes(buffer.getvalue()[:-300])  # header intact
    # the default check finds the missing end marker without decoding
    with pytest.raises(SequenceError, match=r"'s1', frame 2 \(.*00000002.jpg\): the "
                                            "image is cut short .*JPEG end marker"):
        read_got10k(tmp_path, verify="header")
    read_got10k(tmp_path, verify="exists")
    with pytest.raises(SequenceError, match="'s1', frame 2 .*unreadable image decode"):
        read_got10k(tmp_path, verify="full")
    (folder / "00000002.jpg").write_bytes(good)
    (folder / "00000003.jpg").write_bytes(jpeg_bytes(2, size=(H + 2, W)))
    with pytest.raises(SequenceError, match=rf"'s1', frame 3 .*image is {H + 2}x{W} "
                                            rf"\(HxW\) but frame 1 is {H}x{W}; rule: all"):
        read_got10k(tmp_path)


def test_got10k_rejects_bad_sets_and_arguments(tmp_path):
    root = make_got10k(tmp_path / "set")
    with pytest.raises(SequenceError, match=r"unknown sequences \['zz'\]"):
        read_got10k(root, sequences=["a", "zz"])
    (root / "list.txt").write_text("a\nmissing\n")
    with pytest.raises(SequenceError, match="names sequence 'missing', but the directory"):
        read_got10k(root)
    (root / "list.txt").write_text("\n")
    with pytest.raises(SequenceError, match="no sequences found"):
        read_got10k(root)
    (tmp_path / "empty").mkdir()
    with pytest.raises(SequenceError, match="empty: no sequences found"):
        read_got10k(tmp_path / "empty")
    with pytest.raises(SequenceError, match="does not exist"):
        read_got10k(tmp_path, split="train")
    with pytest.raises(SequenceError, match="verify must be one of"):
        read_got10k(root, verify="partial")
    with pytest.raises(SequenceError, match="boxes must be one of"):
        read_got10k(root, boxes="some")
    (root / "list.txt").write_text("a\n")
    (s,) = read_got10k(root)
    with pytest.raises(SequenceError, match=r"frame index must be an integer in \[0, 2\]"):
        s.read_frame(3)
    with pytest.raises(SequenceError, match="every must be an integer >= 1"):
        s.sparse_box_frames(0)


def make_otb_sequence(root, name, numbers, annotations, sep="\t"):
    img = root / name / "img"
    img.mkdir(parents=True, exist_ok=True)
    data = jpeg_bytes(1)
    for k in numbers:
        (img / f"{k:04d}.jpg").write_bytes(data)
    for file, rows in annotations.items():
        write_lines(root / name / file, rows, "%g", sep)


def test_otb_layout_separators_and_two_targets(tmp_path):
    make_otb_sequence(tmp_path, "Basketball", range(1, 4),
                      {"groundtruth_rect.txt": [[1, 2, 3, 4]] * 3})
    make_otb_sequence(tmp_path, "Jogging", range(1, 3),
                      {"groundtruth_rect.1.txt": [[1, 1, 4, 4]] * 2}, sep=",")
    write_lines(tmp_path / "Jogging" / "groundtruth_rect.2.txt", [[5, 5, 6, 6]] * 2,
                sep=" ")
    make_otb_sequence(tmp_path, "Human4", range(1, 3),
                      {"groundtruth_rect.2.txt": [[2, 2, 3, 3]] * 2})
    (tmp_path / "Human4" / "groundtruth_rect.1.txt").write_text("\n")  # empty: skipped
    seqs = read_otb(tmp_path)
    assert [s.name for s in seqs] == ["Basketball", "Human4", "Jogging.1", "Jogging.2"]
    np.testing.assert_array_equal(seqs[0].boxes, [[1, 2, 3, 4]] * 3)
    np.testing.assert_array_equal(seqs[3].boxes, [[5, 5, 6, 6]] * 2)
    assert seqs[2].frames == seqs[3].frames and seqs[0].image_size == (H, W)
    assert seqs[0].cover is None and seqs[0].visible.all()
    assert [s.name for s in read_otb(tmp_path, sequences=["Jogging"])] == [
        "Jogging.1", "Jogging.2"]
    assert [s.name for s in read_otb(tmp_path, sequences=["Jogging.2"])] == ["Jogging.2"]
    with pytest.raises(SequenceError, match=r"unknown sequences \['Jogging.3'\]"):
        read_otb(tmp_path, sequences=["Jogging.3"])


def test_otb_frame_range_quirks(tmp_path):
    # the published David quirk: img/ holds 0001..0770, the annotation covers 300..770
    make_otb_sequence(tmp_path, "David", range(1, 771),
                      {"groundtruth_rect.txt": [[1, 1, 5, 5]] * 471})
    (s,) = read_otb(tmp_path, verify="exists")
    assert len(s) == 471 and s.frames[0].endswith("0300.jpg")
    assert s.frames[-1].endswith("0770.jpg")
    # a small analogue through the table: frames 1..6, annotated 3..5
    make_otb_sequence(tmp_path, "Small", range(1, 7),
                      {"groundtruth_rect.txt": [[1, 1, 5, 5]] * 3})
    with pytest.raises(SequenceError, match=r"'Small', frame 4: groundtruth_rect.txt has 3 "
                                            r"rows but the sequence has 6 frames in img/.*"
                                            "frame_ranges"):
        read_otb(tmp_path, sequences=["Small"])
    (s,) = read_otb(tmp_path, sequences=["Small"], frame_ranges={"small": (3, 5)})
    assert [f[-8:] for f in s.frames] == ["0003.jpg", "0004.jpg", "0005.jpg"]
    with pytest.raises(SequenceError, match=r"'Small', frame 7: the frame file is missing.*"
                                            r"frames 3..7"):
        read_otb(tmp_path, sequences=["Small"], frame_ranges={"Small": (3, 7)})


def test_otb_rejects_bad_input(tmp_path):
    make_otb_sequence(tmp_path, "Boy", [1, 2, 4],
                      {"groundtruth_rect.txt": [[1, 1, 5, 5]] * 3})
    with pytest.raises(SequenceError, match="'Boy', frame 3: the frame file is missing"):
        read_otb(tmp_path)
    (tmp_path / "Boy" / "img" / "0003.jpg").write_bytes(jpeg_bytes(1))
    write_lines(tmp_path / "Boy" / "groundtruth_rect.txt",
                [[1, 1, 5, 5]] * 3 + [[0, 0, 0, 0]])
    with pytest.raises(SequenceError, match="'Boy', frame 4 .*rule: boxes are finite"):
        read_otb(tmp_path)
    (tmp_path / "Boy" / "img" / "0002.jpg").write_bytes(b"\xff\xd8 broken")
    write_lines(tmp_path / "Boy" / "groundtruth_rect.txt", [[1, 1, 5, 5]] * 4)
    with pytest.raises(SequenceError, match=r"'Boy', frame 2 \(.*0002.jpg\): unreadable"):
        read_otb(tmp_path)
    with pytest.raises(SequenceError, match="no sequences found"):
        read_otb(tmp_path / "Boy" / "img")


# ---------------------------------------------------------------- issue 26, sec. 2 and 3


def test_got10k_refuses_nan_and_off_image_points(tmp_path):
    folder = make_got10k(tmp_path, names=["s1"], n=4) / "s1"
    centres = [[6.5, 6.5], [7.5, 6.5], [8.5, 6.5], [9.5, 6.5]]

    def points(file, rows):
        write_lines(folder / file, rows, "%g")

    points("points.txt", [centres[0], [np.nan, np.nan], *centres[2:]])
    with pytest.raises(SequenceError, match=r"'s1', frame 2 \(00000002.jpg\): points.txt "
                                            r"line 2 is \[nan, nan\]; rule: points are "
                                            "finite where the target is visible"):
        read_got10k(tmp_path)
    # NaN where the target is marked absent (the generated benchmark writes nan,nan)
    write_lines(folder / "absence.label", [0, 1, 0, 0], "%d")
    write_lines(folder / "cover.label", [8, 0, 8, 8], "%d")
    (s,) = read_got10k(tmp_path)
    assert np.isnan(s.points[1]).all()
    write_lines(folder / "absence.label", [0, 0, 0, 0], "%d")
    write_lines(folder / "cover.label", [8, 8, 8, 8], "%d")
    # a point far off the 32x24 frame: annotations at the original resolution
    points("points.txt", [centres[0], [640.0, 6.5], *centres[2:]])
    with pytest.raises(SequenceError, match=r"'s1', frame 2 \(00000002.jpg\): points.txt "
                                            r"line 2 is \[640.0, 6.5\]; rule: a point lies "
                                            r"on the 32x24 \(WxH\) frame.*resized"):
        read_got10k(tmp_path)
    points("points.txt", [centres[0], [6.5, -3.0], *centres[2:]])
    with pytest.raises(SequenceError, match=r"frame 2 .*points.txt line 2 is \[6.5, -3.0\]"):
        read_got10k(tmp_path)
    # the centre of a target partly out of view may lie off the image, inside its box
    write_lines(folder / "groundtruth.txt",
                [[2, 3, 10, 8], [-9, 3, 12, 8], [4, 3, 10, 8], [5, 3, 10, 8]], "%g")
    points("points.txt", [centres[0], [-3.5, 6.5], *centres[2:]])
    points("noisy_points.txt", [centres[0], [-23.5, 6.5], *centres[2:]])
    (s,) = read_got10k(tmp_path)
    np.testing.assert_array_equal(s.points[1], [-3.5, 6.5])
    # noisy points (the point moved a fixed distance) may leave the image, but not be NaN
    points("noisy_points.txt", [centres[0], centres[1], [np.nan, 1.0], centres[3]])
    with pytest.raises(SequenceError, match=r"frame 3 .*noisy_points.txt line 3 is "
                                            r"\[nan, 1.0\]"):
        read_got10k(tmp_path)


@pytest.mark.parametrize("box, ok", [
    ([33, 3, 10, 8], False),  # starts beyond the last column (x = W + 1)
    ([32, 3, 10, 8], True),  # covers the last column
    ([-9, 3, 10, 8], False),  # ends before the first column (x + w = 1)
    ([-9, 3, 10.5, 8], True),
    ([2, 25, 10, 8], False),  # below the last row (y = H + 1)
    ([2, -7, 10, 8], False),
    ([2, -6.5, 10, 8], True),
    ([660, 500, 40, 30], False),  # annotated at 640x480 (x20 the frames' size)
])
def test_boxes_wholly_outside_the_image_are_refused(tmp_path, box, ok):
    boxes = [[2, 3, 10, 8], box, [4, 3, 10, 8]]
    make_got10k(tmp_path / "got", names=["s1"], labels=False, boxes=boxes)
    make_otb_sequence(tmp_path / "otb", "Boy", [1, 2, 3], {"groundtruth_rect.txt": boxes})
    if ok:
        assert np.array_equal(read_got10k(tmp_path / "got")[0].boxes[1], box)
        assert np.array_equal(read_otb(tmp_path / "otb")[0].boxes[1], box)
        return
    message = (r"'{}', frame 2 \(.*\): {} line 2 is .* wholly outside the 32x24 \(WxH\) "
               r"frame; rule: a box overlaps its frame .*partly outside is allowed.*"
               "frames resized after annotating")
    with pytest.raises(SequenceError, match=message.format("s1", "groundtruth.txt")):
        read_got10k(tmp_path / "got")
    with pytest.raises(SequenceError, match=message.format("Boy", "groundtruth_rect.txt")):
        read_otb(tmp_path / "otb")
    # where the target is marked absent, its row is not ground truth
    write_lines(tmp_path / "got" / "s1" / "absence.label", [0, 1, 0], "%d")
    assert read_got10k(tmp_path / "got")[0].absent[1]


def test_contradictory_absence_and_cover_labels_are_refused(tmp_path):
    folder = make_got10k(tmp_path, names=["s1"]) / "s1"
    write_lines(folder / "absence.label", [0, 1, 0], "%d")
    write_lines(folder / "cover.label", [8, 8, 8], "%d")
    with pytest.raises(SequenceError, match=r"'s1', frame 2: absence.label line 2 is 1 "
                                            r"\(target absent\) but cover.label line 2 is "
                                            r"8 .*rule: an absent target has cover 0"):
        read_got10k(tmp_path)
    write_lines(folder / "cover.label", [8, 0, 8], "%d")
    assert read_got10k(tmp_path)[0].absent[1]
    # in view but fully occluded (GOT-10k's absence 0, cover 0): allowed, not visible
    write_lines(folder / "absence.label", [0, 0, 0], "%d")
    (s,) = read_got10k(tmp_path)
    np.testing.assert_array_equal(s.visible, [True, False, True])


@pytest.mark.parametrize("fmt, cut", [("JPEG", 1), ("JPEG", 300), ("PNG", 1),
                                      ("PNG", 12)])
def test_a_truncated_frame_is_refused_by_the_default_check(tmp_path, fmt, cut):
    folder = make_got10k(tmp_path, names=["s1"]) / "s1"
    noise = np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(noise).save(buffer, fmt)
    name = "00000003." + ("jpg" if fmt == "JPEG" else "png")
    (folder / "00000003.jpg").unlink()
    (folder / name).write_bytes(buffer.getvalue())
    assert read_got10k(tmp_path)[0].frames[2].endswith(name)  # complete: accepted
    (folder / name).write_bytes(buffer.getvalue()[:-cut])
    with pytest.raises(SequenceError, match=rf"'s1', frame 3 \(.*{name}\): the image is "
                                            rf"cut short .*{fmt} end marker is missing"):
        read_got10k(tmp_path)
    read_got10k(tmp_path, verify="exists")  # the first frame only


# --------------------------------------------------- sec. 2: silent wrong results


@pytest.mark.parametrize("entry", ["ABS", "../elsewhere", "sub/a", ".", "..", "a\\b"])
def test_a_list_txt_entry_outside_the_root_is_refused(tmp_path, entry):
    root = make_got10k(tmp_path / "set")
    make_got10k_sequence(tmp_path / "elsewhere")
    (root / "sub").mkdir()
    make_got10k_sequence(root / "sub" / "a")
    entry = str(tmp_path / "elsewhere") if entry == "ABS" else entry
    (root / "list.txt").write_text(f"a\n{entry}\n")
    with pytest.raises(SequenceError) as caught:
        read_got10k(root)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{root / 'list.txt'} line 2 names {entry!r}" in message
    assert "a folder name inside" in message and str(root) in message


def test_an_otb_folder_whose_img_is_renamed_is_one_clear_error(tmp_path):
    for name in ("Basketball", "Boy"):
        make_otb_sequence(tmp_path, name, range(1, 4),
                          {"groundtruth_rect.txt": [[1, 2, 3, 4]] * 3})
    assert [s.name for s in read_otb(tmp_path)] == ["Basketball", "Boy"]
    (tmp_path / "Boy" / "img").rename(tmp_path / "Boy" / "images")
    with pytest.raises(SequenceError) as caught:
        read_otb(tmp_path)
    message = str(caught.value)
    assert "\n" not in message
    assert f"{tmp_path}: sequence 'Boy':" in message
    assert f"{tmp_path / 'Boy' / 'img'} does not exist" in message
    with pytest.raises(SequenceError, match="'Boy'.*img does not exist"):
        read_otb(tmp_path, sequences=["Boy"])
    # a selection that leaves it out reads the others
    assert [s.name for s in read_otb(tmp_path, sequences=["Basketball"])] == ["Basketball"]
    # frames in img/ but no annotation file left (renamed): also named
    (tmp_path / "Boy" / "images").rename(tmp_path / "Boy" / "img")
    (tmp_path / "Boy" / "groundtruth_rect.txt").rename(tmp_path / "Boy" / "gt.txt")
    with pytest.raises(SequenceError, match=r"sequence 'Boy': .*no non-empty "
                                            r"groundtruth_rect\*\.txt"):
        read_otb(tmp_path)
