"""The box-space EBM losses of `ebm_jax.energy.boxes` with plain energy functions:
method names, the relative space against a direct transcription, padding and images
without boxes, the batch checks, and no Flax/optax/train import."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.energy.boxes import (
    check_detection_batch,
    image_loss,
    make_detection_loss,
    method_loss,
    parse_method,
)
from ebm_jax.ops import decode_relative, encode_relative

NCE = {"sigmas": (0.075, 0.15, 0.3)}


def quadratic_energy(levels, boxes, classes):
    """f = -|box - target|^2 / 100 + class * mean(level 0): a plain function, no Flax."""
    target = jnp.array([10.0, 12.0, 30.0, 40.0])
    return -jnp.sum((boxes - target) ** 2, axis=1) / 100.0 + classes * jnp.mean(levels[0])


def _batch():
    levels = [np.full((2, 4, 4, 1), v, np.float32) for v in (0.5,)]
    levels[0][1] = -0.25
    boxes = np.array([[[8, 10, 28, 44], [40, 40, 60, 70], [0, 0, 1, 1]],
                      [[12, 14, 33, 41], [0, 0, 1, 1], [0, 0, 1, 1]]], np.float32)
    classes = np.array([[1, 2, 1], [2, 1, 1]], np.int32)
    valid = np.array([[True, True, False], [True, False, False]])
    return levels, boxes, classes, valid


def test_method_names():
    assert parse_method("ml-mcmc-4") == ("ml-mcmc", {"num_steps": 4})
    assert parse_method("nce+") == ("nce+", {})
    for bad in ("ml-mcmc", "ml-mcmc-0", "sm", "foo"):
        with pytest.raises(ValueError, match="method must be one of"):
            parse_method(bad)
    with pytest.raises(ValueError, match=r"needs hyperparameters \['sigmas'\]"):
        method_loss("nce", 8)
    with pytest.raises(ValueError, match="unknown"):
        method_loss("nce", 8, beta=0.1, **NCE)
    with pytest.raises(ValueError, match="num_samples"):
        make_detection_loss("nce", 0, **NCE)


def test_image_loss_is_the_shared_loss_in_the_relative_space():
    levels, boxes, classes, valid = _batch()
    lv = [x[0] for x in levels]
    loss = method_loss("nce", 16, **NCE)
    key = jax.random.key(3)
    got = jax.jit(lambda k: image_loss(quadratic_energy, loss, lv, boxes[0], classes[0],
                                       valid[0], k))(key)

    # direct: each valid box is its own reference and its own target
    def energy(x, y):
        ref, cls = x[:4], x[4]
        return quadratic_energy(lv, decode_relative(y, ref)[None], cls[None])[0]

    xs = np.concatenate([boxes[0], classes[0][:, None]], 1)
    want = jax.jit(lambda k: batch_loss(make_loss("nce", num_samples=16, **NCE), energy,
                                        xs, encode_relative(boxes[0], boxes[0]), k,
                                        weights=valid[0]))(key)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # the space is (cx/w0, cy/h0, log w, log h): a unit step in cx moves by w0
    y = encode_relative(boxes[0, :1], boxes[0, :1])
    moved = decode_relative(y + jnp.array([1.0, 0, 0, 0]), boxes[0, :1])
    np.testing.assert_allclose(moved - boxes[0, :1], [[20, 0, 20, 0]], atol=1e-4)


@pytest.mark.parametrize("method, hp", [("nce+", {**NCE, "beta": 0.1}),
                                        ("ml-mcmc-2", {"step_size": 1e-5})])
def test_batch_loss_ignores_padding_and_images_without_boxes(method, hp):
    levels, boxes, classes, valid = _batch()
    loss_fn = make_detection_loss(method, 2, **hp)
    key = jax.random.key(0)
    fn = jax.jit(lambda b, k: loss_fn(quadratic_energy, b, k))
    value, metrics = fn((levels, boxes, classes, valid), key)
    assert np.isfinite(float(value)) and float(metrics["images_with_boxes"]) == 2
    moved = boxes.copy()
    moved[0, 2] = [5, 5, 40, 40]  # a padding row changes: the loss does not
    again, _ = fn((levels, moved, classes, valid), key)
    np.testing.assert_allclose(again, value, rtol=1e-5, atol=1e-7)
    # an image without a valid box has weight 0: the mean is over the other image
    none = valid.copy()
    none[1] = False
    one, m = fn((levels, boxes, classes, none), key)
    keys = jax.random.split(key, 2)
    first = jax.jit(lambda k: image_loss(
        quadratic_energy, method_loss(method, 2, **hp), [lv[0] for lv in levels],
        boxes[0], classes[0], valid[0], k))(keys[0])
    np.testing.assert_allclose(one, first, rtol=1e-4, atol=1e-6)
    assert float(m["images_with_boxes"]) == 1


def test_check_detection_batch():
    _, boxes, classes, valid = _batch()
    check_detection_batch(boxes, classes, valid, num_classes=2)
    with pytest.raises(ValueError, match="no valid ground-truth box"):
        check_detection_batch(boxes, classes, np.zeros_like(valid), 2)
    with pytest.raises(ValueError, match=r"classes must be in \[1, 1\]"):
        check_detection_batch(boxes, classes, valid, 1)
    bad = boxes.copy()
    bad[0, 0] = [10, 10, 5, 20]
    with pytest.raises(ValueError, match="ground-truth boxes"):
        check_detection_batch(bad, classes, valid, 2)


def test_the_box_losses_import_no_training_code():
    code = ("import sys, ebm_jax.energy.boxes; "
            "print([m for m in ('flax', 'optax', 'ebm_jax.train') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={"JAX_PLATFORMS": "cpu", "PATH": ""})
    assert out.stdout.strip() == "[]"


# ------------------------------------------------------------------ tracking box loss

from ebm_jax.energy import gaussian_mixture  # noqa: E402
from ebm_jax.energy.boxes import (  # noqa: E402
    ascend_boxes,
    make_box_loss,
    make_tracking_box_loss,
)
from tests.tolerances import assert_within, float32_sum_atol  # noqa: E402

# the EBM regression paper, sec. 5: PrDiMP's KLD-IS and the inferred NCE+ for tracking
TRACKING = {"kld-is": {"sigmas": (0.05, 0.5), "label_sigma": 0.05},
            "nce": {"sigmas": (0.05, 0.5)},
            "nce+": {"sigmas": (0.05, 0.5), "beta": 0.1},
            "ml-is": {"sigmas": (0.05, 0.5)}}


def pair_energy(inputs, boxes, conditions):
    """f = -|box - target|^2 / scale, the target and scale one pair's inputs (a dict:
    any pytree); no per-box condition."""
    assert conditions is None
    return -jnp.sum((boxes - inputs["target"]) ** 2, axis=1) / inputs["scale"]


def _pairs():
    inputs = {"target": np.array([[10, 12, 30, 40], [50, 40, 80, 90]], np.float32),
              "scale": np.array([40.0, 250.0], np.float32)}
    boxes = np.array([[8, 10, 28, 44], [52, 38, 84, 86]], np.float32)
    return inputs, boxes


def _numpy_energy(target, scale, rel, ref):
    """pair_energy of relative boxes in float64, decode_relative written out."""
    ref_wh = ref[2:] - ref[:2]
    centre, wh = rel[:, :2] * ref_wh, np.exp(rel[:, 2:])
    boxes = np.concatenate([centre - wh / 2, centre + wh / 2], axis=1)
    return -np.sum((boxes - target) ** 2, axis=1) / scale


def _numpy_log_mixture(y, centre, sigmas):
    d = y.shape[-1]
    comps = [-0.5 * np.sum((y - centre) ** 2, -1) / s**2 - d * np.log(s)
             - 0.5 * d * np.log(2 * np.pi) for s in sigmas]
    return np.logaddexp.reduce(comps, axis=0) - np.log(len(sigmas))


def _numpy_lse(a):
    m = np.max(a)
    return m + np.log(np.sum(np.exp(a - m)))


@pytest.mark.parametrize("method", sorted(TRACKING))
def test_tracking_loss_equals_a_numpy_transcription(method):
    """The batch loss of one target box per pair, against the paper's equations written
    out in NumPy float64 on the same samples (drawn with the keys the docstrings name:
    pair i `split(key, B)[i]`, its one box `split(., 1)[0]`)."""
    hp = TRACKING[method]
    m = 16
    inputs, boxes = _pairs()
    key = jax.random.key(7)
    loss_fn = make_tracking_box_loss(method, m, **hp)
    got, _ = jax.jit(lambda i, b, k: loss_fn(pair_energy, (i, b), k))(inputs, boxes, key)
    q = gaussian_mixture(hp["sigmas"])
    per_pair, bounds = [], []
    for i, pair_key in enumerate(jax.random.split(key, 2)):
        k = jax.random.split(pair_key, 1)[0]
        ref = boxes[i].astype(np.float64)
        y = np.asarray(encode_relative(boxes[i], boxes[i]), np.float64)
        t, s = inputs["target"][i].astype(np.float64), float(inputs["scale"][i])
        if method == "nce+":
            k_noise, k_beta = jax.random.split(k)
            samples = np.asarray(q.sample(k_noise, jnp.asarray(y, jnp.float32), m), np.float64)
            v = np.asarray(q.scaled(hp["beta"], "std").sample(
                k_beta, jnp.zeros(4, jnp.float32), 1)[0], np.float64)
        else:
            samples = np.asarray(q.sample(k, jnp.asarray(y, jnp.float32), m), np.float64)
        f = _numpy_energy(t, s, samples, ref)
        log_q = _numpy_log_mixture(samples, y, hp["sigmas"])
        if method in ("nce", "nce+"):  # eq. 12 / 16: y^(0) = y (+ v)
            y0 = y + (v if method == "nce+" else 0.0)
            ys = np.concatenate([y0[None], samples])
            logits = _numpy_energy(t, s, ys, ref) - _numpy_log_mixture(ys, y, hp["sigmas"])
            value = _numpy_lse(logits) - logits[0]
            terms = np.abs(logits)
        elif method == "ml-is":  # eq. 5
            value = _numpy_lse(f - log_q) - np.log(m) - _numpy_energy(t, s, y[None], ref)[0]
            terms = np.abs(f) + np.abs(log_q)
        else:  # eq. 7, label density N(y, label_sigma^2 I)
            log_p = _numpy_log_mixture(samples, y, (hp["label_sigma"],))
            value = (_numpy_lse(f - log_q) - np.log(m)
                     - np.mean(f * np.exp(log_p - log_q)))
            terms = np.abs(f) + np.abs(log_q) + np.abs(f * np.exp(log_p - log_q))
        per_pair.append(value)
        # every sample's f and log q is a float32 sum of a few (4 coordinates, 2
        # components) terms of at most these sizes; the loss sums M + 1 of them
        bounds.append(float32_sum_atol(8 * (m + 1), np.sum(terms) + 8 * np.sum(
            np.abs(samples)) + np.sum(np.abs(f)) * 4))
    assert_within(float(got), np.mean(per_pair), np.mean(bounds))


def test_tracking_loss_is_the_box_loss_with_one_box_and_no_condition():
    inputs, boxes = _pairs()
    key = jax.random.key(1)
    a, _ = make_tracking_box_loss("nce", 8, **TRACKING["nce"])(pair_energy, (inputs, boxes),
                                                               key)
    b, metrics = make_box_loss("nce", 8, **TRACKING["nce"])(
        pair_energy, (inputs, boxes[:, None], None, np.ones((2, 1), bool)), key)
    assert np.array_equal(np.asarray(a), np.asarray(b))  # the same program: bit for bit
    assert float(metrics["examples_with_boxes"]) == 2


def test_tracking_loss_bad_arguments_name_them():
    with pytest.raises(ValueError, match="num_samples"):
        make_tracking_box_loss("nce", 0, **TRACKING["nce"])
    with pytest.raises(ValueError, match="sigmas"):
        make_tracking_box_loss("nce", 8, sigmas=(0.05, 0.0))
    with pytest.raises(ValueError, match="sigmas"):
        make_tracking_box_loss("kld-is", 8, sigmas=(-0.05,), label_sigma=0.05)
    with pytest.raises(ValueError, match="label_sigma"):
        make_tracking_box_loss("kld-is", 8, sigmas=(0.05,), label_sigma=0.0)
    inputs, boxes = _pairs()
    with pytest.raises(ValueError, match=r"boxes must have shape \(B, 4\)"):
        make_tracking_box_loss("nce", 8, **TRACKING["nce"])(pair_energy,
                                                            (inputs, boxes[:, None]),
                                                            jax.random.key(0))


def test_ascend_boxes_raises_f_and_refuses_non_finite_boxes():
    inputs = {"target": np.array([10, 12, 30, 40], np.float32),
              "scale": np.array(400.0, np.float32)}
    starts = np.array([[8, 10, 28, 44], [14, 15, 36, 38]], np.float32)
    f0 = np.asarray(pair_energy(inputs, starts, None))
    out, f, scale = jax.jit(lambda b: ascend_boxes(
        pair_energy, inputs, b, num_steps=10, step_length=(1e-3, 1e-3, 1e-3, 1e-3)))(starts)
    assert np.all(np.asarray(f) > f0)
    # f is the energy of the returned boxes (the same float32 program on other values:
    # within a 4-term float32 sum of squares of boxes of size ~40)
    assert_within(f, pair_energy(inputs, out, None), float32_sum_atol(8, 4 * 40.0**2 / 400))
    assert np.all(np.asarray(scale) == 1.0)
    # with rejection, a huge step is undone and f never drops
    _, f_rej, scale_rej = ascend_boxes(pair_energy, inputs, starts, num_steps=3,
                                       step_length=50.0, reject_decreasing=True)
    assert np.all(np.asarray(f_rej) >= f0) and np.all(np.asarray(scale_rej) < 1.0)
    bad = starts.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"boxes\[1\] has a non-finite coordinate"):
        ascend_boxes(pair_energy, inputs, bad, num_steps=1, step_length=1e-3)
    # detection's form: per-box conditions (classes) travel with the boxes
    _, f_cls, _ = ascend_boxes(lambda lv, b, c: quadratic_energy(lv, b, c),
                               [np.full((4, 4, 1), 0.5, np.float32)], starts,
                               np.array([1, 2]), num_steps=2, step_length=1e-3)
    assert np.all(np.isfinite(np.asarray(f_cls)))
