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
