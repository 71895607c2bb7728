"""benchmarks/tracking.py: the convolution formulations it times, its inputs, the weight
copy to PyTorch, and (where a Python with torch is at hand) the agreement of the JAX and
eager PyTorch SiamFC that the harness checks before timing."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from ebm_jax.models.alexnet import SiamFCAlexNet
from ebm_jax.tracking import SiamFCSettings, balanced_bce, make_labels
from tests.tolerances import float32_sum_atol

ROOT = Path(__file__).parents[2]
_SPEC = importlib.util.spec_from_file_location("bench_tracking",
                                               ROOT / "benchmarks" / "tracking.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


@pytest.fixture(scope="module")
def tiny_model():
    """A width-0.125 backbone (building one costs seconds of small compilations); tests
    take `nnx.clone`s of it."""
    return SiamFCAlexNet(width=0.125, rngs=nnx.Rngs(0))


@pytest.fixture(scope="module")
def baseline():
    """One eager PyTorch server for the module's tests (starting torch takes seconds)."""
    server = bench.TorchBaseline(_torch_python(), 1)
    yield server
    server.close()


def _torch_python() -> str:
    """This Python if it has torch, else $TORCH_PYTHON or .venv-torch (the baseline's
    side environment) when they have torch, numpy and cv2; else the test is skipped."""
    if importlib.util.find_spec("torch") is not None:
        return sys.executable
    for cand in (os.environ.get("TORCH_PYTHON"), ROOT / ".venv-torch" / "bin" / "python"):
        if cand and Path(cand).exists() and subprocess.run(
                [str(cand), "-c", "import torch, numpy, cv2"],
                capture_output=True).returncode == 0:
            return str(cand)
    pytest.skip("no Python with torch (set TORCH_PYTHON or run benchmarks/run_tracking.sh)")


@nnx.jit
def _layer_grads(layer, h, ct):
    return nnx.grad(lambda m, x: jnp.sum(m(x) * ct), argnums=(0, 1))(layer, h)


@pytest.mark.heavy
def test_conv_formulations_match_the_model_in_values_and_gradients(tiny_model):
    model = nnx.clone(tiny_model)
    model.eval()
    # conv1 (11x11, stride 2) and conv2 (5x5, 2 groups) on small inputs
    for i, size in ((0, 17), (1, 9)):
        layer = model.convs[i]
        _, stride, groups, _, _ = bench.LAYERS[i]
        h = jax.random.normal(jax.random.key(i), (2, size, size, layer.kernel.shape[2] * groups))
        want = layer(h)
        ct = jax.random.normal(jax.random.key(10 + i), want.shape)
        want_grads = jax.tree.leaves(_layer_grads(layer, h, ct))
        for kind in ("grouped", "patchgrad"):
            other = bench.FormulatedConv(layer.kernel, layer.bias, stride, groups, kind)
            np.testing.assert_allclose(other(h), want, rtol=1e-4, atol=1e-5)
            got = jax.tree.leaves(_layer_grads(other, h, ct))
            assert len(got) == len(want_grads) == 3  # bias, kernel, input
            for g, w in zip(got, want_grads):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(jnp.abs(w).max()))
    # the whole network: every layer replaced, on the same weights; the model untouched
    # (the agreement test below runs such a network against PyTorch)
    other = bench.with_conv(model, "patchgrad")
    assert all(isinstance(c, bench.FormulatedConv) for c in other.convs)
    assert not any(isinstance(c, bench.FormulatedConv) for c in model.convs)
    for mine, theirs in zip(other.convs, model.convs):
        np.testing.assert_array_equal(mine.kernel[...], theirs.kernel[...])
    with pytest.raises(ValueError, match="one of"):
        bench.with_conv(model, "winograd")


def test_patches_by_hand():
    x = jnp.arange(9.0).reshape(1, 3, 3, 1)  # [[0 1 2] [3 4 5] [6 7 8]]
    p = bench._patches(x, 2, 2, (1, 1), 2, 2)
    np.testing.assert_array_equal(p[0, 0, 0], [0, 1, 3, 4])
    np.testing.assert_array_equal(p[0, 1, 1], [4, 5, 7, 8])
    p = bench._patches(x, 2, 2, (2, 2), 1, 1)
    np.testing.assert_array_equal(p[0, 0, 0], [0, 1, 3, 4])


def test_torch_layout_of_a_grouped_conv_matches_a_brute_force_conv(tiny_model):
    """conv2 (2 groups) in PyTorch's layout, evaluated by a NumPy transcription of
    torch.nn.functional.conv2d, equals the JAX layer."""
    model = nnx.clone(tiny_model)
    sd = bench.torch_state_dict(model)
    w, b = sd["conv2.weight"], sd["conv2.bias"]  # (out, in / 2, 5, 5)
    c_in = model.channels[0]
    assert w.shape == (model.channels[1], c_in // 2, 5, 5)
    x = np.asarray(jax.random.normal(jax.random.key(4), (1, 7, 7, c_in)))
    want = np.asarray(model.convs[1](jnp.asarray(x)))[0]  # (3, 3, out)
    chw = x[0].transpose(2, 0, 1)
    got = np.zeros_like(want)
    per_group_out = w.shape[0] // 2
    for o in range(w.shape[0]):
        g = o // per_group_out
        block = chw[g * (c_in // 2):(g + 1) * (c_in // 2)]
        for yy in range(3):
            for xx in range(3):
                got[yy, xx, o] = np.sum(w[o] * block[:, yy:yy + 5, xx:xx + 5]) + b[o]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert {"bn1.running_mean", "bn4.running_var", "conv5.weight"} <= set(sd)
    assert "bn5.weight" not in sd  # no batch norm after the last convolution


def test_calibrated_batch_norm_holds_the_batch_statistics(tiny_model):
    model = nnx.clone(tiny_model)
    images = jax.random.uniform(jax.random.key(6), (3, 95, 95, 3)) * 255
    bench.calibrate_batch_norm(model, images)
    h = model.convs[0](images)
    np.testing.assert_allclose(model.norms[0].mean[...], h.mean((0, 1, 2)), rtol=1e-4)
    np.testing.assert_allclose(model.norms[0].var[...], h.var((0, 1, 2)), rtol=1e-3)
    assert model.norms[0].use_running_average and model.norms[0].momentum == 0.95


def test_synthetic_sequence_and_training_pairs():
    frames, boxes = bench.synthetic_sequence(7, 12)
    again, _ = bench.synthetic_sequence(7, 12)
    np.testing.assert_array_equal(frames, again)
    assert frames.shape == (12, 240, 320, 3) and frames.dtype == np.uint8
    x, y, w, h = boxes.T
    assert np.all((w > 0) & (h > 0) & (x >= 1) & (y >= 1))
    assert np.all((x + w - 1 <= 320) & (y + h - 1 <= 240))
    assert len(np.unique(boxes[:, :2], axis=0)) > 6  # the target moves
    with pytest.raises(ValueError, match="num_frames"):
        bench.synthetic_sequence(0, 1)
    # pairs: frame i holds the value i, so each pair's indices can be read back
    n = 50
    coded = np.broadcast_to(np.arange(n, dtype=np.uint8)[:, None, None, None], (n, 2, 2, 3))
    coded_boxes = np.stack([np.arange(n) + 1.0] * 2 + [np.full(n, 5.0)] * 2, 1)
    batch = bench.training_pairs(coded, coded_boxes, 16, seed=0, max_gap=4)
    zi = batch["z_frames"][:, 0, 0, 0].astype(int)
    xi = batch["x_frames"][:, 0, 0, 0].astype(int)
    assert np.all(np.abs(zi - xi) < 4)
    np.testing.assert_array_equal(batch["z_boxes"][:, 0], zi + 1)
    np.testing.assert_array_equal(batch["x_boxes"][:, 1], xi + 1)
    assert batch["z_boxes"].dtype == np.float32


def test_spread_and_summary_by_hand():
    s = bench.spread([3.0, 1.0, 2.0])
    assert (s["median"], s["min"], s["max"]) == (2.0, 1.0, 3.0)
    runs = [{"updates": 10, "wall": 2.0, "cpu": 3.0}, {"updates": 10, "wall": 1.0, "cpu": 1.0}]
    out = bench.summarize(runs, "updates")
    assert out["rate"]["median"] == pytest.approx(7.5)
    assert out["wall"]["max"] == pytest.approx(0.2)
    assert out["cpu"]["median"] == pytest.approx(0.2)


def _tiny_setup(tmp_path, model, seed=0):
    settings = SiamFCSettings()
    frames, boxes = bench.synthetic_sequence(seed, 6)
    batch = bench.training_pairs(frames, boxes, 2, seed)
    model = nnx.clone(model)
    crops = jnp.stack([bench.crop_square(f, jnp.asarray(bench.box_to_center(b)[:2],
                                                        jnp.float32), 120.0, 255)
                       for f, b in zip(frames[:3], boxes[:3])])
    bench.calibrate_batch_norm(model, crops)
    np.savez(tmp_path / "data.npz", frames=frames, first_box=boxes[0], **batch)
    return settings, frames, boxes, batch, model


def test_torch_baseline_agrees_and_a_changed_weight_is_refused(tmp_path, tiny_model,
                                                             baseline):
    settings, frames, boxes, batch, model = _tiny_setup(tmp_path, tiny_model)
    torch_settings = {**bench.dataclasses.asdict(settings), **bench.SGD}
    weights = bench.torch_state_dict(model)
    np.savez(tmp_path / "w.npz", **weights)
    side = bench.JaxSiamFC(bench.with_conv(model, "patchgrad"), settings, batch,
                           jax.random.key(0))
    assert baseline.info["threads"] == 1
    baseline.ask(cmd="load", weights=str(tmp_path / "w.npz"),
                 data=str(tmp_path / "data.npz"), width=0.125, settings=torch_settings)
    report = bench.check_agreement(side, baseline, frames, boxes, settings, tmp_path,
                                   check_frames=6, box_tol=0.5)
    assert report["response_max_abs_diff"] <= 1e-4 * report["response_max_abs"]
    assert report["box_max_abs_diff"] <= 0.5 and 0 <= report["port_crop_min_iou"] <= 1
    step = baseline.ask(cmd="train", steps=1)
    assert np.isfinite(step["losses"][0]) and step["wall"] > 0

    weights["conv5.bias"] = weights["conv5.bias"] + 0.5
    np.savez(tmp_path / "w.npz", **weights)
    baseline.ask(cmd="load", weights=str(tmp_path / "w.npz"),
                 data=str(tmp_path / "data.npz"), width=0.125, settings=torch_settings)
    with pytest.raises(bench.DisagreementError, match="response maps differ"):
        bench.check_agreement(side, baseline, frames, boxes, settings, tmp_path,
                              check_frames=6, box_tol=0.5)


def test_cuda_baseline_without_cuda_is_refused_with_a_clear_error(tmp_path, capsys):
    python = _torch_python()
    if subprocess.run([python, "-c", "import sys, torch; sys.exit(not "
                       "torch.cuda.is_available())"]).returncode == 0:
        pytest.skip("this torch sees a CUDA GPU")
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        bench.TorchBaseline(python, 1, "cuda")
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--torch-python", python, "--torch-device",
                    "cuda", "--width", "0.125", "--frames", "2", "--check-frames", "2",
                    "--conv", "model"])
    assert "--torch-device cuda" in capsys.readouterr().err
    assert not (tmp_path / "tracking.json").exists()


def test_torch_labels_and_balanced_loss_match_the_jax_loss(tmp_path, baseline):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (3, 17, 17)).astype(np.float32)
    offsets = rng.uniform(-1, 1, (3, 2)).astype(np.float32)
    np.savez(tmp_path / "in.npz", logits=logits, offsets=offsets)
    baseline.ask(cmd="loss", data=str(tmp_path / "in.npz"), out=str(tmp_path / "out.npz"))
    got = np.load(tmp_path / "out.npz")
    labels, weights = jax.vmap(lambda o: make_labels(17, 2.0, o))(jnp.asarray(offsets))
    assert 0 < labels.sum() < labels.size
    np.testing.assert_array_equal(got["labels"], labels)
    # two float32 computations, each normalising 17 x 17 weights by their sum and
    # summing 289 positive terms (each within 289 eps32 relative, tests/tolerances.py),
    # plus each term's own few roundings (|logit| <= 10: under 16 eps32)
    assert float(got["loss"]) == pytest.approx(float(balanced_bce(logits, labels, weights)),
                                               rel=float32_sum_atol(2 * 289 + 16, 1.0))


@pytest.mark.slow
def test_harness_end_to_end_writes_consistent_ratios(tmp_path):
    python = _torch_python()
    rc = bench.main(["--out", str(tmp_path), "--torch-python", python, "--width", "0.125",
                     "--frames", "4", "--repeats", "2", "--train-steps", "1",
                     "--check-frames", "4", "--batch-size", "2", "--conv", "model", "grouped"])
    assert rc == 0
    report = json.loads((tmp_path / "tracking.json").read_text())
    for name, per in (("tracking", 3), ("training", 1)):
        r = report[name]
        torch_rate = np.median(r["torch"]["rate"]["values"])
        for kind in ("model", "grouped"):
            rates = r["jax"][kind]["rate"]["values"]
            assert len(rates) == 2
            assert r["ratio"][kind] == pytest.approx(np.median(rates) / torch_rate)
            assert r["met"][kind] == (r["ratio"][kind] >= r["target"])
    assert report["torch_info"]["threads"] == 1
    md = (tmp_path / "tracking.md").read_text()
    assert "conv `grouped`" in md and "target 2x" in md and "target 1.5x" in md
