import dataclasses
import json
import math
import re

import cv2
import numpy as np
import pytest
from PIL import Image

from ebm_jax.data import tracking as trk
from ebm_jax.data import tracking_render as render
from ebm_jax.data import tracking_shapes as shapes

SMALL = dict(num_sequences=2, num_frames=24, height=72, width=96)
# rare events made frequent so that a few short sequences hold all of them
EVENTFUL = dict(out_of_view_rate=0.15, occlusion_rate=0.15, jump_prob=0.2, blur_prob=0.3)


def _files(root):
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def _floats(path):
    return np.array([[float(v) for v in line.split(",")]
                     for line in path.read_text().splitlines()])


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    spec = trk.TrackingSpec("train", **SMALL, **EVENTFUL)
    dest = tmp_path_factory.mktemp("tracking") / "train"
    return trk.generate_tracking_split(dest, spec, progress=False), spec


def test_same_spec_gives_byte_identical_files(split, tmp_path):
    dest, spec = split  # the fixture's split: one worker or several, by CPU count
    again = trk.generate_tracking_split(tmp_path / "again", spec, progress=False,
                                        workers=1)
    first, second = _files(dest), _files(again)
    assert len(first) == 2 + 2 * (24 + 7)  # list, spec; per sequence 24 frames + 7 files
    assert first == second


def test_parallel_workers_write_the_same_files(tmp_path):
    spec = trk.TrackingSpec("train", **{**SMALL, "num_sequences": 4, "num_frames": 3})
    one = trk.generate_tracking_split(tmp_path / "one", spec, progress=False, workers=1)
    two = trk.generate_tracking_split(tmp_path / "two", spec, progress=False, workers=2)
    assert _files(one) == _files(two) and len(_files(one)) == 2 + 4 * (3 + 7)
    with pytest.raises(ValueError, match="workers must be an integer >= 1, got 0"):
        trk.generate_tracking_split(tmp_path / "x", spec, progress=False, workers=0)


def test_other_seed_or_split_gives_other_sequences(split, tmp_path):
    dest, spec = split
    frame = "train_00001/00000001.jpg"
    other_seed = trk.generate_tracking_split(
        tmp_path / "seed1", dataclasses.replace(spec, seed=1, num_sequences=1), progress=False)
    assert (other_seed / frame).read_bytes() != (dest / frame).read_bytes()
    plans = {name: trk.plan_sequence(dataclasses.replace(spec, split=name), 0)
             for name in ("train", "val", "test")}
    for a, b in (("train", "val"), ("train", "test"), ("val", "test")):
        assert not np.allclose(plans[a].target.poses, plans[b].target.poses)
        assert not np.array_equal(render.render_frame(plans[a], 0).image,
                                  render.render_frame(plans[b], 0).image)


def test_layout_and_labels_agree(split):
    dest, spec = split
    names = (dest / "list.txt").read_text().splitlines()
    assert names == ["train_00001", "train_00002"]
    fields = json.loads(json.dumps(dataclasses.asdict(spec)))
    del fields["scene_group"], fields["scene_path"]  # defaults, left out (the identity
    # of splits written before they existed)
    assert json.loads((dest / "spec.json").read_text()) == {**fields, "version": trk.VERSION}
    n = spec.num_frames
    for name in names:
        seq = dest / name
        frames = sorted(p.name for p in seq.glob("*.jpg"))
        assert frames == [f"{i:08d}.jpg" for i in range(1, n + 1)]
        image = np.asarray(Image.open(seq / frames[-1]))
        assert image.shape == (spec.height, spec.width, 3) and image.dtype == np.uint8
        boxes = _floats(seq / "groundtruth.txt")
        visible = _floats(seq / "visible_ratio.txt")[:, 0]
        absent = _floats(seq / "absence.label")[:, 0]
        cover = _floats(seq / "cover.label")[:, 0]
        points, noisy = _floats(seq / "points.txt"), _floats(seq / "noisy_points.txt")
        for rows in (boxes, visible, absent, cover, points, noisy):
            assert len(rows) == n
        assert np.all(boxes[:, 2:] > 0) and np.all((visible >= 0) & (visible <= 1))
        np.testing.assert_array_equal(cover, np.ceil(8 * visible))
        np.testing.assert_array_equal(absent, visible == 0)
        assert (visible[0], cover[0], absent[0]) == (1.0, 8, 0)
        present = absent == 0
        centres = boxes[present, :2] + (boxes[present, 2:] - 1) / 2
        np.testing.assert_allclose(points[present], centres, atol=2e-4)
        assert np.isnan(points[~present]).all() and np.isnan(noisy[~present]).all()
        shift = np.hypot(*(noisy[present] - points[present]).T)
        np.testing.assert_allclose(shift, spec.point_shift, atol=2e-3)
        meta = json.loads((seq / "meta.json").read_text())
        assert meta["frame_size"] == {"height": spec.height, "width": spec.width}
        assert meta["num_frames"] == n and meta["background"] in render.PHOTO_POOLS["train"]


def test_first_frame_target_is_fully_visible_and_large_enough():
    spec = trk.TrackingSpec("test", num_sequences=12, num_frames=1, height=48, width=64,
                            target_size=(0.05, 0.5), num_distractors=(3, 3),
                            distractor_front_prob=1.0)
    for i in range(spec.num_sequences):
        plan = trk.plan_sequence(spec, i)
        frame = render.render_frame(plan, 0)
        x, y, w, h = frame.box
        assert frame.visible == 1.0
        assert min(w, h) >= trk.MIN_FIRST_SIDE - 1e-9
        assert x >= 1 and y >= 1 and x + w <= spec.width and y + h <= spec.height


def test_box_is_the_rendered_mask_bounding_box():
    """Frames with the target fully visible: the bounding box of the pixels whose
    alpha > 0.5 is the ground truth within 1 px (smooth shapes; sharp polygon corners
    may miss a pixel row); on 4 x 4 sub-pixels, within 0.35 px for every shape."""
    spec = trk.TrackingSpec("train", num_sequences=12, num_frames=10, height=72, width=96)
    kinds, checked = set(), 0
    for i in range(spec.num_sequences):
        plan = trk.plan_sequence(spec, i)
        kinds.add(plan.target.shape.kind)
        for t in range(spec.num_frames):
            frame = render.render_frame(plan, t)
            if frame.visible != 1.0:
                continue
            checked += 1
            x, y, w, h = frame.box
            truth = np.array([x - 1.5, y - 1.5, x - 1.5 + w, y - 1.5 + h])  # pixel-area edges
            for k, tol in ((1, 1.0), (4, 0.35)):
                if k == 1 and plan.target.shape.kind == "polygon":
                    continue
                mask = render.target_alpha(plan, t, supersample=k) > 0.5
                rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
                edges = np.array([cols[0], rows[0], cols[-1] + 1, rows[-1] + 1]) / k - 0.5
                np.testing.assert_allclose(edges, truth, atol=tol, err_msg=f"{i} {t} {k}")
    assert kinds == set(shapes.SHAPE_KINDS) and checked > 60


def _plan(target_pose, front_pose=None, front_shape=shapes.Shape("ellipse"), n=1):
    poses = np.tile(np.asarray(target_pose, float), (n, 1))
    target = render.ObjectTrack(shapes.Shape("ellipse"), poses, "coins", (0, 0, 100, 100))
    front = () if front_pose is None else (render.ObjectTrack(
        front_shape, np.tile(np.asarray(front_pose, float), (n, 1)), "camera",
        (0, 0, 100, 100)),)
    zeros = np.zeros((n, 3))
    return render.SequencePlan(48, 64, "camera", 1.0, (1.0, 1.0, 1.0),
                               np.tile([200.0, 200.0, 128.0], (n, 1)), target, (), front,
                               zeros, zeros, 0.0, (0,), 1.5)


def test_hand_computed_boxes_and_visible_fractions():
    # a circle of radius 8 at (30, 20): the box spans [22, 38] x [12, 28] in pixel areas
    frame = render.render_frame(_plan((30.0, 20.0, 8.0, 8.0, 0.7)), 0)
    np.testing.assert_allclose(frame.box, [23.5, 13.5, 16.0, 16.0], atol=1e-4)
    assert frame.visible == 1.0 and frame.image.shape == (48, 64, 3)
    # the box centre x - 1 + (w - 1) / 2 is the shape's centre
    np.testing.assert_allclose(frame.box[:2] - 1 + (frame.box[2:] - 1) / 2, [30, 20])
    # a rotated ellipse: half extents sqrt((a cos)^2 + (b sin)^2), sqrt((a sin)^2 + (b cos)^2)
    a, b, phi = 12.0, 5.0, 0.4
    box = shapes.shape_box(shapes.Shape("ellipse"), (30.0, 20.0, a, b, phi))
    hx, hy = math.hypot(a * math.cos(phi), b * math.sin(phi)), math.hypot(a * math.sin(phi),
                                                                          b * math.cos(phi))
    np.testing.assert_allclose(box, [30 - hx + 1.5, 20 - hy + 1.5, 2 * hx, 2 * hy], atol=1e-4)
    # centred on the frame's left border (pixel -0.5): half of it is visible
    assert render.render_frame(_plan((-0.5, 20.0, 8.0, 6.0, 0.0)), 0).visible == \
        pytest.approx(0.5, abs=1e-6)
    # entirely outside: absent, its box outside the frame
    frame = render.render_frame(_plan((-20.0, 20.0, 8.0, 8.0, 0.0)), 0)
    assert frame.visible == 0.0 and frame.box[0] + frame.box[2] < 1
    # only the soft edge's faint tail (alpha < 0.5) inside: less than 1e-3 of it, absent
    plan = _plan((-20.6, 20.0, 20.0, 20.0, 0.0))
    assert 0 < render.target_alpha(plan, 0).max() < 0.5
    assert render.render_frame(plan, 0).visible == 0.0
    # covered by a larger object in front: absent; half covered by a half-plane-like one
    assert render.render_frame(_plan((30.0, 20.0, 8.0, 8.0, 0.0),
                                     (30.0, 20.0, 20.0, 20.0, 0.0)), 0).visible == 0.0
    # a flat-sided superellipse (|u|^8 + |v|^8 = 1) whose left side is at x = 30
    side = 40.0 * 2 ** (0.5 - 1 / 8)
    half = render.render_frame(_plan((30.0, 20.0, 8.0, 8.0, 0.0),
                                     (70.0, 20.0, side, side, 0.0),
                                     shapes.Shape("rounded_rect", (8.0,))), 0)
    assert half.visible == pytest.approx(0.5, abs=0.01)


def test_polygon_radius_lies_on_its_edges():
    shape = shapes.random_shape(np.random.default_rng(3), "polygon")
    k = len(shape.params) // 2
    angles, radii = np.array(shape.params[:k]), np.array(shape.params[k:])
    np.testing.assert_allclose(shapes.shape_radius(shape, angles), radii, rtol=1e-9)
    # the midpoint direction of each edge meets the edge: the point is collinear with it
    p = np.stack([radii * np.cos(angles), radii * np.sin(angles)], 1)
    q = np.roll(p, -1, 0)
    mid = (p + q) / 2
    theta = np.arctan2(mid[:, 1], mid[:, 0])
    on_ray = shapes.shape_radius(shape, theta)[:, None] * np.stack(
        [np.cos(theta), np.sin(theta)], 1)
    np.testing.assert_allclose(on_ray, mid, atol=1e-9)
    for kind in shapes.SHAPE_KINDS:
        s = shapes.random_shape(np.random.default_rng(1), kind)
        r = shapes.shape_radius(s, np.linspace(0, 2 * np.pi, 5000))
        assert r.max() <= 1 + 1e-6 and r.min() > 0.3


def test_events_absent_while_out_of_view_and_sizes_in_range(split):
    dest, spec = split
    out_frames, occluded = 0, 0
    for i in range(spec.num_sequences):
        meta = json.loads((dest / f"train_{i + 1:05d}" / "meta.json").read_text())
        absent = _floats(dest / f"train_{i + 1:05d}" / "absence.label")[:, 0]
        for a, b in meta["events"]["out_of_view"]:
            assert absent[a:b + 1].all()
            out_frames += b - a + 1
        occluded += len(meta["events"]["occlusions"])
        plan = trk.plan_sequence(spec, i)
        size = np.sqrt(plan.target.poses[:, 2] * plan.target.poses[:, 3])
        assert np.all((size / size[0] >= spec.scale_range[0] - 1e-9)
                      & (size / size[0] <= spec.scale_range[1] + 1e-9))
    assert out_frames > 0 and occluded > 0
    # jumps move the target by at least 10 % of the shorter side minus the walk's step
    spec = trk.TrackingSpec("train", num_sequences=1, num_frames=60, height=96, width=128,
                            jump_prob=0.3, out_of_view_rate=0.0)
    plan = trk.plan_sequence(spec, 0)
    steps = np.hypot(*np.diff(plan.target.poses[:, :2], axis=0).T)
    jumps = plan.meta["events"]["jumps"]
    assert jumps and np.median(steps[np.array(jumps) - 1]) > 3 * np.median(steps)


def test_photo_pools_are_disjoint():
    train, test = render.PHOTO_POOLS["train"], render.PHOTO_POOLS["test"]
    assert not set(train) & set(test)

    def thumb(name):
        photo = render.load_photo(name)
        grey = photo.mean(axis=2)
        assert photo.dtype == np.float32 and photo.shape[2] == 3
        assert photo.min() >= 0 and photo.max() <= 1
        return cv2.resize(grey, (32, 32), interpolation=cv2.INTER_AREA)

    thumbs = {name: thumb(name) for name in train + test}
    # no photo of one pool is (a crop-free copy of) a photo of the other
    closest = min(np.abs(thumbs[a] - thumbs[b]).mean() for a in train for b in test)
    assert closest > 0.03
    for pool in (train, test):
        assert len(render.background_photos(pool)) >= 3


def test_existing_destination(split, tmp_path, monkeypatch):
    dest, spec = split
    before = _files(dest)
    monkeypatch.setattr(trk, "write_jpeg_frame", lambda *a: pytest.fail("rewrote frames"))
    assert trk.generate_tracking_split(dest, spec, progress=False) == dest
    assert _files(dest) == before
    with pytest.raises(ValueError, match=re.escape(str(dest))):
        trk.generate_tracking_split(dest, dataclasses.replace(spec, seed=5), progress=False)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="other"):
        trk.generate_tracking_split(tmp_path / "other", spec, progress=False)


def test_failed_generation_leaves_nothing(tmp_path, monkeypatch):
    calls = []
    real = trk.write_jpeg_frame

    def failing(path, frame):
        calls.append(path)
        if len(calls) == 5:
            raise RuntimeError("disk full")
        real(path, frame)

    monkeypatch.setattr(trk, "write_jpeg_frame", failing)
    spec = trk.TrackingSpec("val", **SMALL)
    with pytest.raises(RuntimeError, match="disk full"):
        trk.generate_tracking_split(tmp_path / "val", spec, progress=False)
    assert list(tmp_path.iterdir()) == []
    # an empty directory in the way is replaced by the finished split
    monkeypatch.setattr(trk, "write_jpeg_frame", real)
    (tmp_path / "val").mkdir()
    out = trk.generate_tracking_split(tmp_path / "val", spec, progress=False)
    assert (out / "list.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["val"]


@pytest.mark.parametrize("field, value", [
    ("split", "training"), ("num_sequences", 0), ("num_frames", 2.5), ("height", 16),
    ("width", True), ("seed", -1), ("point_shift", float("nan")), ("box_every", 0),
    ("target_size", (0.3, 0.1)), ("target_size", (0.1,)), ("scale_range", (1.2, 2.0)),
    ("num_distractors", (0, 9)), ("jump_prob", 1.5), ("out_of_view_rate", -0.1),
    ("aspect_change", 0.5), ("noise_std", 2.0), ("edge_softness", 0.0),
    ("scene_group", 0), ("scene_group", 65), ("scene_path", 1), ("scene_path", "yes"),
])
def test_spec_validation_names_the_field(field, value):
    with pytest.raises(trk.TrackingSpecError, match=rf"TrackingSpec\.{field} must be"):
        trk.TrackingSpec(**{"split": "train", "num_sequences": 1, "num_frames": 4,
                            "scene_group": 2, field: value})
    with pytest.raises(trk.TrackingSpecError, match=r"scene_path .* needs scene_group in "
                                                    r"\[2, 64\], got 1"):
        trk.TrackingSpec("train", 2, 4, scene_path=True)


def test_spec_identity_and_list_fields():
    spec = trk.TrackingSpec("test", 3, 5, target_size=[0.1, 0.2])
    assert spec.target_size == (0.1, 0.2)
    ident = trk.spec_identity(spec)
    assert ident["version"] == trk.VERSION and ident["target_size"] == [0.1, 0.2]
    assert json.loads(json.dumps(ident)) == ident and ident["box_every"] == 10
    with pytest.raises(ValueError, match=r"sequence index must be in \[0, 3\)"):
        trk.plan_sequence(spec, 3)


def test_scene_groups_share_the_scene_and_not_the_target():
    spec = trk.TrackingSpec("train", 4, 12, height=72, width=96, scene_group=2)
    plans = [trk.plan_sequence(spec, i) for i in range(4)]
    alone = trk.plan_sequence(dataclasses.replace(spec, scene_group=1), 0)
    for a, b in ((plans[0], plans[1]), (plans[2], plans[3]), (plans[0], alone)):
        assert a.background == b.background and a.background_gain == b.background_gain
        for field in ("camera", "illumination", "blur"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    for a, b in ((plans[0], plans[1]), (plans[2], plans[3])):
        assert not np.allclose(a.target.poses, b.target.poses)  # own target and motion
        assert a.noise_seed != b.noise_seed
    assert not np.allclose(plans[1].camera, plans[2].camera)  # another scene
    assert [p.meta["scene"] for p in plans] == [0, 0, 1, 1]
    assert "scene" not in alone.meta
    ident = trk.spec_identity(spec)
    assert ident["scene_group"] == 2 and ident != trk.spec_identity(
        dataclasses.replace(spec, scene_group=1))
    assert "scene_group" not in trk.spec_identity(dataclasses.replace(spec, scene_group=1))


def test_scene_path_moves_a_groups_targets_together():
    spec = trk.TrackingSpec("train", 6, 40, height=72, width=96, scene_group=3,
                            jump_prob=0.1, out_of_view_rate=0.05)
    together = dataclasses.replace(spec, scene_path=True)
    apart = [trk.plan_sequence(spec, i) for i in range(6)]
    plans = [trk.plan_sequence(together, i) for i in range(6)]
    for i in range(6):
        first = plans[i - i % 3]
        # the group's first path, to the bit, and the events that shaped it
        np.testing.assert_array_equal(plans[i].target.poses[:, :2], first.target.poses[:, :2])
        for key in ("jumps", "out_of_view"):
            assert plans[i].meta["events"][key] == first.meta["events"][key]
        # everything else as without the shared path: own target, scene of the group
        np.testing.assert_array_equal(plans[i].target.poses[:, 2:], apart[i].target.poses[:, 2:])
        assert plans[i].target.texture == apart[i].target.texture
        assert plans[i].target.shape.kind == apart[i].target.shape.kind
        np.testing.assert_array_equal(plans[i].camera, apart[i].camera)
    for i in (0, 3):  # a group's first sequence is the one without the shared path
        np.testing.assert_array_equal(plans[i].target.poses, apart[i].target.poses)
        assert plans[i].meta == apart[i].meta
    assert not np.allclose(plans[1].target.poses[:, :2], apart[1].target.poses[:, :2])
    assert not np.allclose(plans[0].target.poses[:, :2], plans[3].target.poses[:, :2])
    assert trk.spec_identity(together)["scene_path"] is True
    assert "scene_path" not in trk.spec_identity(spec)


def test_scene_ids_read_the_group_from_the_name():
    assert trk.scene_ids(["train_00001", "train_00002", "train_00003", "val_00008"], 2) == [
        0, 0, 1, 3]
    assert trk.scene_ids(["test_00005"], 1) == [4]
    for name in ("GOT-10k_Train_000001x", "train_00000", "video_00003"):
        with pytest.raises(ValueError, match="is not a generated one"):
            trk.scene_ids([name], 2)
