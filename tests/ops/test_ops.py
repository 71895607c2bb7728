"""PrRoIPool against a numerical integral, its box gradient and continuity; box
utilities and guided NMS on hand-computed cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.ops import (
    box_iou,
    box_iou_np,
    decode_relative,
    encode_relative,
    fpn_levels,
    guided_nms,
    intersection_union,
    prroi_pool,
    prroi_pool_fpn,
    prroi_pool_integral,
    xywh_to_xyxy,
    xyxy_to_xywh,
)

RNG = np.random.default_rng(0)
FEATURES = RNG.normal(size=(6, 7, 2)).astype(np.float32)


def bilinear(features, y, x):
    """f(y, x) = sum_ij F[i, j] k(y - i) k(x - j), zero outside the map (NumPy)."""
    h, w, _ = features.shape
    ky = np.maximum(0.0, 1.0 - np.abs(y[..., None] - np.arange(h)))  # (..., H)
    kx = np.maximum(0.0, 1.0 - np.abs(x[..., None] - np.arange(w)))  # (..., W)
    return np.einsum("...h,hwc,...w->...c", ky, features.astype(np.float64), kx)


def numeric_pool(features, box, p, scale=1.0, offset=0.5, n=300):
    """Midpoint rule on an n x n grid inside each bin."""
    x0, y0, x1, y1 = np.asarray(box, np.float64) * scale - offset
    out = np.zeros((p, p, features.shape[2]))
    for a in range(p):
        ya, yb = y0 + (y1 - y0) * a / p, y0 + (y1 - y0) * (a + 1) / p
        ys = ya + (np.arange(n) + 0.5) / n * (yb - ya)
        for b in range(p):
            xa, xb = x0 + (x1 - x0) * b / p, x0 + (x1 - x0) * (b + 1) / p
            xs = xa + (np.arange(n) + 0.5) / n * (xb - xa)
            yy, xx = np.meshgrid(ys, xs, indexing="ij")
            out[a, b] = bilinear(features, yy, xx).mean(axis=(0, 1))
    return out


@pytest.mark.parametrize("box", [
    (1.3, 0.7, 5.2, 4.9),      # inside
    (0.0, 0.0, 7.0, 6.0),      # the whole map, edges on the border
    (-2.5, -1.0, 3.1, 2.2),    # partly outside (zero there)
    (5.0, 3.6, 9.5, 8.0),      # partly outside on the far side
])
def test_prroi_pool_equals_numerical_integral(box):
    got = np.asarray(prroi_pool(FEATURES, np.array([box], np.float32), output_size=3))[0]
    want = numeric_pool(FEATURES, box, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def test_prroi_pool_scale_and_unaligned_convention():
    box = np.array([[4.0, 2.0, 18.0, 20.0]], np.float32)
    got = np.asarray(prroi_pool(FEATURES, box, output_size=2, spatial_scale=0.25,
                                aligned=False))[0]
    want = numeric_pool(FEATURES, box[0], 2, scale=0.25, offset=0.0)
    np.testing.assert_allclose(got, want, atol=1e-4 * np.abs(want).max())


def test_prroi_pool_gradient_wrt_box_matches_finite_differences():
    box = jnp.array([1.3, 0.9, 5.2, 4.4])

    def f(b):
        return jnp.sum(prroi_pool(FEATURES, b[None], output_size=3) * jnp.arange(1.0, 3.0))

    g = np.asarray(jax.grad(f)(box))
    eps = 1e-2
    fd = np.array([(f(box.at[i].add(eps)) - f(box.at[i].add(-eps))) / (2 * eps)
                   for i in range(4)])
    np.testing.assert_allclose(g, fd, rtol=2e-2, atol=2e-3)
    assert np.all(np.abs(g) > 1e-3)  # every edge moves the pooled values


def test_prroi_pool_is_continuous_across_pixel_boundaries():
    # with aligned=True, pixel centre j sits at x = j + 0.5: move x1 across 4.5
    vals = [np.asarray(prroi_pool(FEATURES, np.array([[1.0, 1.0, x1, 4.0]], np.float32),
                                  output_size=2))
            for x1 in (4.5 - 1e-3, 4.5, 4.5 + 1e-3)]
    assert np.abs(vals[0] - vals[1]).max() < 5e-3
    assert np.abs(vals[2] - vals[1]).max() < 5e-3


def test_prroi_pool_gradient_wrt_features_is_the_weights():
    box = np.array([[1.3, 0.7, 5.2, 4.9]], np.float32)
    g = jax.grad(lambda F: prroi_pool(F, box, output_size=1)[0, 0, 0, 0])(jnp.asarray(FEATURES))
    # the bin is an average: the weights over the map sum to the covered fraction (1 inside)
    np.testing.assert_allclose(float(jnp.sum(g[..., 0])), 1.0, rtol=1e-5)
    assert float(jnp.sum(jnp.abs(g[..., 1]))) == 0.0


def test_prroi_pool_rejects_bad_input():
    with pytest.raises(ValueError, match=r"boxes\[0\].*width or height <= 0"):
        prroi_pool(FEATURES, np.array([[2.0, 1.0, 2.0, 3.0]]), output_size=3)
    with pytest.raises(ValueError, match=r"boxes\[1\] has a non-finite"):
        prroi_pool(FEATURES, np.array([[0.0, 0.0, 1.0, 1.0], [np.nan, 0, 1, 1]]),
                   output_size=3)
    with pytest.raises(ValueError, match="6 x 7 map is smaller than the 7 x 7 pooling grid"):
        prroi_pool(FEATURES, np.array([[0.0, 0.0, 1.0, 1.0]]), output_size=7)
    with pytest.raises(ValueError, match=r"shape \(N, 4\)"):
        prroi_pool(FEATURES, np.array([0.0, 0.0, 1.0, 1.0]), output_size=3)


def test_prroi_pool_jits_and_vmaps_over_images():
    feats = jnp.asarray(RNG.normal(size=(3, 8, 8, 4)), jnp.float32)
    boxes = jnp.asarray([[[0.5, 0.5, 4.0, 6.0]]] * 3, jnp.float32)
    out = jax.jit(jax.vmap(lambda f, b: prroi_pool(f, b, output_size=2)))(feats, boxes)
    assert out.shape == (3, 1, 2, 2, 4)
    np.testing.assert_allclose(out[1], prroi_pool(feats[1], boxes[1], output_size=2),
                               rtol=1e-5, atol=1e-6)


def test_fpn_levels_and_pyramid_pooling():
    boxes = np.array([[0, 0, 32, 32], [0, 0, 224, 224], [0, 0, 112, 112],
                      [0, 0, 900, 900]], np.float32)
    np.testing.assert_array_equal(fpn_levels(boxes), [0, 2, 1, 3])
    levels = [jnp.asarray(RNG.normal(size=(256 // s, 256 // s, 3)), jnp.float32)
              for s in (4, 8, 16, 32)]
    box = np.array([[10.0, 20.0, 130.0, 150.0]], np.float32)  # sqrt(wh) ~ 125: P3
    want = prroi_pool(levels[1], box, output_size=2, spatial_scale=1 / 8)
    np.testing.assert_allclose(prroi_pool_fpn(levels, box, output_size=2, method="dense"),
                               want, rtol=1e-6)
    np.testing.assert_allclose(prroi_pool_fpn(levels, box, output_size=2,
                                              method="integral"),
                               want, rtol=0, atol=1e-5 * np.abs(want).max())
    with pytest.raises(ValueError, match="method must be one of"):
        prroi_pool_fpn(levels, box, method="window")


@pytest.mark.parametrize("box", [
    (1.3, 0.7, 5.2, 4.9), (0.0, 0.0, 7.0, 6.0), (-2.5, -1.0, 3.1, 2.2),
    (5.0, 3.6, 9.5, 8.0), (-9.0, -9.0, -3.0, -2.0), (8.0, 7.5, 12.0, 11.0)])
def test_integral_pooling_equals_numerical_integral(box):
    """The integral-image path: inside, on the border, partly and wholly outside."""
    got = np.asarray(prroi_pool_integral(FEATURES, np.array([box], np.float32),
                                         output_size=3))[0]
    want = numeric_pool(FEATURES, box, 3)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * max(np.abs(want).max(), 1))
    unaligned = np.asarray(prroi_pool_integral(FEATURES, np.array([box], np.float32) * 4,
                                               output_size=2, spatial_scale=0.25,
                                               aligned=False))[0]
    want = numeric_pool(FEATURES, np.asarray(box) * 4, 2, scale=0.25, offset=0.0)
    np.testing.assert_allclose(unaligned, want, rtol=0,
                               atol=1e-4 * max(np.abs(want).max(), 1))


@pytest.mark.heavy
def test_integral_fpn_pooling_equals_the_dense_path_with_box_gradients():
    """The fast path of the detection head (integral images) against the dense
    contraction: an FPN of 256 channels on a 256 px image, ReLU features (positive
    mean), boxes of every level; values and gradients in the box coordinates."""
    rng = np.random.default_rng(1)
    levels = [jnp.asarray(np.maximum(rng.normal(size=(256 // s, 256 // s, 256)), 0),
                          jnp.float32) for s in (4, 8, 16, 32)]
    xy = rng.uniform(-10, 220, (24, 2))
    wh = np.exp(rng.uniform(np.log(8), np.log(250), (24, 2)))
    boxes = jnp.asarray(np.concatenate([xy, xy + wh], 1), jnp.float32)
    weights = jnp.asarray(rng.normal(size=(24, 7, 7, 256)), jnp.float32)

    def f(b, method):
        return jnp.sum(weights * prroi_pool_fpn(levels, b, method=method))

    dense, integral = (prroi_pool_fpn(levels, boxes, method=m) for m in ("dense", "integral"))
    # float32 prefix sums: within 1e-4 of the features' scale (the smallest bins)
    np.testing.assert_allclose(integral, dense, rtol=0, atol=1e-4 * float(dense.max()))
    assert float(jnp.abs(integral - dense).mean()) < 1e-6 * float(dense.max())
    g_dense, g_int = (jax.grad(f)(boxes, m) for m in ("dense", "integral"))
    np.testing.assert_allclose(g_int, g_dense, rtol=1e-3,
                               atol=1e-4 * float(jnp.abs(g_dense).max()))


# ------------------------------------------------------------------------ boxes


def test_iou_and_conversions_by_hand():
    a = np.array([[0.0, 0.0, 10.0, 10.0]])
    b = np.array([[5.0, 0.0, 15.0, 10.0], [20.0, 20.0, 30.0, 30.0], [0.0, 0.0, 10.0, 10.0],
                  [2.0, 2.0, 4.0, 4.0]])
    np.testing.assert_allclose(box_iou(a, b), [[50 / 150, 0.0, 1.0, 4 / 100]], rtol=1e-6)
    np.testing.assert_allclose(xyxy_to_xywh(b[:1]), [[5, 0, 10, 10]])
    np.testing.assert_allclose(xywh_to_xyxy(xyxy_to_xywh(b)), b)


def test_intersection_union_by_hand_in_both_formats_and_array_modules():
    a_xyxy = np.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 4.0, 2.0]])
    b_xyxy = np.array([[5.0, 0.0, 15.0, 10.0], [10.0, 10.0, 12.0, 12.0]])
    for xp in (np, jnp):
        inter, union = intersection_union(xp.asarray(a_xyxy), xp.asarray(b_xyxy), xp=xp)
        np.testing.assert_array_equal(inter, [50.0, 0.0])
        np.testing.assert_array_equal(union, [150.0, 12.0])
    inter, union = intersection_union(np.asarray(xyxy_to_xywh(a_xyxy)),
                                      np.asarray(xyxy_to_xywh(b_xyxy)), box_format="xywh",
                                      xp=np)
    np.testing.assert_array_equal(inter, [50.0, 0.0])
    np.testing.assert_array_equal(union, [150.0, 12.0])
    # xyxy clamps an inverted box to zero area; xywh takes w h as given
    _, union = intersection_union(np.array([2.0, 2.0, 1.0, 1.0]), np.zeros(4), xp=np)
    assert union == 0.0
    with pytest.raises(ValueError, match="box_format must be 'xyxy' or 'xywh'"):
        intersection_union(np.zeros(4), np.zeros(4), box_format="cxcywh", xp=np)


def test_box_iou_np_by_hand_and_against_the_jax_iou():
    a = np.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 0.0, 0.0], [np.nan, 0, 1, 1]])
    b = np.array([[5.0, 0.0, 10.0, 10.0], [3.0, 3.0, 0.0, 0.0], [0.0, 0, 1, 1]])
    iou = box_iou_np(a, b)  # xywh
    np.testing.assert_allclose(iou[0], 50 / 150, rtol=4 * np.finfo(np.float64).eps)
    assert iou[1] == 0.0  # two empty boxes: 0 (the eps), not NaN
    assert np.isnan(iou[2])
    # broadcasting: one box against many
    np.testing.assert_array_equal(box_iou_np(a[0], b[:2]), iou[:2] * [1, 0] + [0, 0])
    # the JAX (N, M) IoU of float32 xyxy boxes: the same numbers to float32 rounding (a
    # handful of rounded operations in the intersection, the union and the quotient)
    rng = np.random.default_rng(3)
    xywh = np.concatenate([rng.uniform(0, 20, (6, 2)), rng.uniform(1, 20, (6, 2))], 1)
    xyxy = np.asarray(xywh_to_xyxy(xywh.astype(np.float32)))
    pairwise = box_iou_np(xyxy[:, None].astype(np.float64), xyxy[None].astype(np.float64),
                          box_format="xyxy")
    np.testing.assert_allclose(box_iou(xyxy, xyxy), pairwise, rtol=0,
                               atol=16 * np.finfo(np.float32).eps)


def test_relative_encoding_round_trip_and_meaning():
    ref = np.array([10.0, 20.0, 50.0, 100.0])  # w0 = 40, h0 = 80
    box = np.array([12.0, 18.0, 60.0, 90.0])  # centre (36, 54), size 48 x 72
    rel = np.asarray(encode_relative(box, ref))
    np.testing.assert_allclose(rel, [36 / 40, 54 / 80, np.log(48), np.log(72)], rtol=1e-6)
    np.testing.assert_allclose(decode_relative(rel, ref), box, rtol=1e-5)


def test_guided_nms_by_hand():
    boxes = np.array([
        [0, 0, 10, 10],     # A: f 3, score 0.5, class 0
        [1, 0, 11, 10],     # B: IoU(A, B) = 90/110 > 0.5, f 2, score 0.9 -> A's group
        [1, 0, 11, 10],     # C: like B but class 1: its own group
        [20, 20, 30, 30],   # D: far away, class 0
        [0, 0, 10, 10],     # E: padding (invalid)
    ], np.float32)
    f = np.array([3.0, 2.0, 1.0, 0.5, 10.0])
    scores = np.array([0.5, 0.9, 0.3, 0.7, 1.0])
    classes = np.array([0, 0, 1, 0, 0])
    valid = np.array([True, True, True, True, False])
    keep, new = guided_nms(boxes, f, scores, classes, valid)
    np.testing.assert_array_equal(keep, [True, False, True, True, False])
    np.testing.assert_allclose(np.asarray(new)[np.asarray(keep)], [0.9, 0.3, 0.7])
    # guided by f, not by score: with B's f above A's, B is kept and A joins its group
    keep2, new2 = guided_nms(boxes, np.array([2.0, 3.0, 1.0, 0.5, 0.0]), scores, classes,
                             valid)
    np.testing.assert_array_equal(keep2, [False, True, True, True, False])
    assert float(new2[1]) == pytest.approx(0.9)
    # at most 2 detections: the lowest-scored kept box (C, 0.3) goes
    keep3, _ = guided_nms(boxes, f, scores, classes, valid, max_detections=2)
    np.testing.assert_array_equal(keep3, [True, False, False, True, False])
    # a chain: X suppresses Y (IoU > 0.5); Z overlaps Y but not X, so Z is kept
    chain = np.array([[0, 0, 10, 10], [3, 0, 13, 10], [6, 0, 16, 10]], np.float32)
    keep4, _ = guided_nms(chain, np.array([3.0, 2.0, 1.0]), np.ones(3), np.zeros(3, int))
    np.testing.assert_array_equal(keep4, [True, False, True])


# ------------------------------------------------------------------------ energy head

from flax import nnx  # noqa: E402

from ebm_jax.models.detection_head import DetectionEnergyHead, refine_boxes  # noqa: E402


def _head_and_levels(seed=0):
    head = DetectionEnergyHead(in_channels=4, num_classes=3, hidden=16, pool_size=3,
                               rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    levels = [jnp.asarray(rng.normal(size=(128 // s, 128 // s, 4)), jnp.float32)
              for s in (4, 8, 16, 32)]
    return head, levels


def test_energy_head_shapes_init_and_class_entry():
    head, levels = _head_and_levels()
    assert float(jnp.std(head.out.kernel[...])) == pytest.approx(0.001, rel=0.1)
    assert float(jnp.abs(head.out.bias[...]).max()) == 0.0
    boxes = np.array([[4, 4, 30, 40], [10, 12, 20, 22]], np.float32)
    f = head(levels, boxes, np.array([1, 3]))
    assert f.shape == (2,)
    # f is the entry of the box's class among the classes + 1 outputs
    f_all = [head(levels, boxes, np.array([k, k])) for k in (1, 2, 3)]
    np.testing.assert_allclose(f[0], f_all[0][0], rtol=1e-6)
    np.testing.assert_allclose(f[1], f_all[2][1], rtol=1e-6)
    with pytest.raises(ValueError, match=r"classes must be a 1-D array in \[1, 3\]"):
        head(levels, boxes, np.array([0, 4]))
    with pytest.raises(ValueError, match="width or height <= 0"):
        head(levels, np.array([[4, 4, 4, 40]], np.float32), np.array([1]))
    p = DetectionEnergyHead(rngs=nnx.Rngs(0))  # the paper's size: 12544 pooled features
    assert p.fc1.kernel.shape == (12544, 1024) and p.out.kernel.shape == (1024, 81)


@pytest.mark.heavy
def test_refinement_never_lowers_f_and_halves_rejected_steps():
    head, levels = _head_and_levels(1)
    # a head with large outputs, so that steps matter
    head.out.kernel[...] = head.out.kernel[...] * 1000
    boxes = np.array([[4, 4, 30, 40], [10, 12, 20, 22], [30, 2, 60, 50]], np.float32)
    classes = np.array([1, 2, 3])
    f0 = np.asarray(head(levels, boxes, classes))
    for lengths in ((1e-3, 1e-3, 4e-3, 4e-3), (5.0, 5.0, 5.0, 5.0)):
        refined, f, scale = refine_boxes(head, levels, boxes, classes,
                                         step_length=lengths, num_steps=10)
        assert np.all(np.asarray(f) >= f0 - 1e-5)
        np.testing.assert_allclose(f, head(levels, refined, classes), rtol=1e-4,
                                   atol=1e-5)
        k = np.log(np.asarray(scale)) / np.log(0.5)  # number of rejected steps
        np.testing.assert_allclose(k, np.round(k), atol=1e-4)
    assert np.any(np.asarray(scale) < 1.0)  # steps of 5 in log size overshoot: halved
    assert np.any(np.abs(np.asarray(refined) - boxes) > 1e-3)


def test_prroi_pool_equals_the_direct_per_pixel_kernel():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "bench_detection_ops", Path(__file__).parents[2] / "benchmarks" / "detection_ops.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    boxes = np.array([[1.3, 0.7, 5.2, 4.9], [-2.5, -1.0, 3.1, 2.2], [0, 0, 7, 6]], np.float32)
    for aligned in (True, False):
        got = np.asarray(prroi_pool(FEATURES, boxes, output_size=3, aligned=aligned))
        want = bench.prroi_pool_direct(FEATURES, boxes, 3, aligned=aligned)
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(want).max())
    # the head-training benchmark runs the experiment's step (tiny sizes)
    r = bench.bench_train_step("nce", boxes=2, channels=4, hidden=8, pool=2, image_size=64,
                               strides=(4, 8), canonical_size=48.0, num_samples=2,
                               rounds=1)
    assert set(r["steps_per_second"]) == {"dense", "integral"} and r["levels"] == 2
    assert all(v > 0 for v in r["steps_per_second"].values()) and r["speedup"] > 0


# ------------------------------------------------------------------------ head training


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    levels = [jnp.asarray(rng.normal(size=(2, 128 // s, 128 // s, 4)), jnp.float32)
              for s in (4, 8, 16, 32)]
    boxes = np.array([[[10, 12, 50, 60], [60, 20, 100, 90], [0, 0, 1, 1]],
                      [[30, 30, 90, 80], [0, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    classes = np.array([[1, 2, 1], [3, 1, 1]])
    valid = np.array([[True, True, False], [True, False, False]])
    return levels, boxes, classes, valid


# Table 2's hyperparameters (the paper's sec. 4.2)
TABLE2 = {"ml-is": {"sigmas": (0.0375, 0.075, 0.15)},
          "kld-is": {"sigmas": (0.0375, 0.075, 0.15), "label_sigma": 0.0225},
          "ml-mcmc-1": {"step_size": 1e-5}, "nce": {"sigmas": (0.075, 0.15, 0.3)},
          "dsm": {"sigma": 0.075}, "nce+": {"sigmas": (0.075, 0.15, 0.3), "beta": 0.1}}


@pytest.mark.heavy
@pytest.mark.parametrize("method", ["ml-is", "kld-is", "ml-mcmc-1", "nce", "dsm", "nce+"])
def test_every_table2_loss_is_finite_and_ignores_padding(method):
    from ebm_jax.energy.boxes import make_detection_loss

    head, _ = _head_and_levels()
    levels, boxes, classes, valid = _batch()
    loss_fn = make_detection_loss(method, 8, **TABLE2[method])
    value, metrics = jax.jit(lambda b, k: loss_fn(head, b, k))(
        (levels, boxes, classes, valid), jax.random.key(0))
    assert np.isfinite(float(value)) and float(metrics["images_with_boxes"]) == 2
    moved = boxes.copy()
    moved[0, 2] = [5, 5, 40, 40]  # a padding row changes: the loss does not
    again, _ = loss_fn(head, (levels, moved, classes, valid), jax.random.key(0))
    np.testing.assert_allclose(again, value, rtol=1e-5, atol=1e-7)


def test_head_training_with_nce_plus_lowers_the_loss():
    import optax

    from ebm_jax.energy.boxes import check_detection_batch, make_detection_loss
    from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate

    head, _ = _head_and_levels()
    batch = _batch()
    check_detection_batch(*batch[1:], num_classes=3)
    opt = optax.adam(3e-3)
    graphdef, state = create_train_state(head, opt, jax.random.key(0))
    mesh = make_mesh(1)
    loss_fn = make_detection_loss("nce+", 16, **TABLE2["nce+"])
    step = make_train_step(graphdef, loss_fn, opt, mesh)
    state = replicate(state, mesh)
    losses = []
    for _ in range(30):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.1
    with pytest.raises(ValueError, match="no valid ground-truth box"):
        check_detection_batch(batch[1], batch[2], np.zeros_like(batch[3]), 3)
    with pytest.raises(ValueError, match=r"classes must be in \[1, 3\]"):
        check_detection_batch(batch[1], np.full_like(batch[2], 4), batch[3], 3)


def test_detection_config_takes_the_integral_pooling():
    from pathlib import Path

    from ebm_jax.config import ConfigError, load_config
    from ebm_jax.detection import build_head

    path = Path(__file__).parents[2] / "experiments" / "ebm_regression" / "table2_detection.py"
    assert load_config(f"{path}:tiny", ["pool_method=integral"]).pool_method == "integral"
    with pytest.raises(ConfigError, match="pool_method"):
        load_config(f"{path}:tiny", ["pool_method=window"])
    heads = [build_head(channels=3, num_classes=4, hidden=8, pool_size=2, strides=(4, 8),
                        canonical_size=48.0, key=jax.random.key(0), pool_method=m)
             for m in ("dense", "integral")]
    levels = [jnp.asarray(RNG.normal(size=(64 // s, 64 // s, 3)), jnp.float32) for s in (4, 8)]
    boxes = jnp.asarray([[3.0, 4.0, 30.0, 41.0], [20.0, 10.0, 60.0, 33.0]])
    f = [h(levels, boxes, jnp.asarray([1, 3])) for h in heads]
    np.testing.assert_allclose(f[1], f[0], rtol=1e-4, atol=1e-6)
