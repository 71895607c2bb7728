"""ebm_jax.contrastive (the losses) against direct NumPy transcriptions, and one
train step of each method on a tiny encoder."""

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ebm_jax.contrastive import (
    ema_update,
    enqueue,
    estimate_log_z,
    infonce_loss,
    init_memory_bank,
    init_queue,
    instdisc_nce_loss,
    instdisc_softmax_loss,
    normalise,
    resolve_log_z,
    update_memory_bank,
)
from tests.tolerances import float32_sum_atol

RNG = np.random.default_rng(0)


def unit(*shape):
    x = RNG.normal(size=shape)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def test_infonce_matches_numpy():
    q, k, queue, t = unit(8, 16), unit(8, 16), unit(32, 16), 0.07
    ref = []
    for i in range(8):
        logits = np.concatenate([[q[i] @ k[i]], queue @ q[i]]) / t
        ref.append(-logits[0] + np.log(np.sum(np.exp(logits))))
    got = infonce_loss(jnp.asarray(q, jnp.float32), jnp.asarray(k, jnp.float32),
                       jnp.asarray(queue, jnp.float32), t)
    np.testing.assert_allclose(got, np.mean(ref), rtol=1e-5)
    # finite even with a temperature that makes exp overflow in float32
    assert np.isfinite(float(infonce_loss(q, k, queue, 1e-3)))


def _nce_ref(f, bank, idx, noise, t, z):
    n, m = bank.shape[0], noise.shape[1]
    pn = 1.0 / n
    total = 0.0
    for b in range(f.shape[0]):
        p_data = np.exp(bank[idx[b]] @ f[b] / t) / z
        total += np.log(p_data / (p_data + m * pn))
        for j in noise[b]:
            p = np.exp(bank[j] @ f[b] / t) / z
            total += np.log(m * pn / (p + m * pn))
    return -total / f.shape[0]


def test_instdisc_nce_matches_numpy_with_z_from_the_first_batch():
    n, b, m, t = 50, 4, 10, 0.07
    bank, f = unit(n, 8), unit(b, 8)
    idx = RNG.integers(0, n, b)
    noise = RNG.integers(0, n, (b, m))
    # Z = mean(exp(v.f/T)) * n over the batch's positive and noise entries
    all_idx = np.concatenate([idx[:, None], noise], axis=1)
    z = np.mean(np.exp(np.einsum("bmd,bd->bm", bank[all_idx], f) / t)) * n
    log_z = estimate_log_z(f, bank, idx, noise, t)
    np.testing.assert_allclose(np.exp(log_z), z, rtol=1e-5)
    got = instdisc_nce_loss(f, bank, idx, noise, t, log_z)
    np.testing.assert_allclose(got, _nce_ref(f, bank, idx, noise, t, z), rtol=1e-5)
    # Z is estimated once: a stored finite value wins over a new batch's estimate
    assert float(resolve_log_z(jnp.nan, log_z)) == pytest.approx(float(log_z))
    assert float(resolve_log_z(jnp.float32(3.0), log_z)) == 3.0


def test_instdisc_softmax_matches_numpy():
    bank, f, t = unit(20, 8), unit(4, 8), 0.1
    idx = np.array([3, 0, 19, 3])
    logits = f @ bank.T / t
    ref = np.mean([np.log(np.sum(np.exp(row))) - row[i] for row, i in zip(logits, idx)])
    np.testing.assert_allclose(instdisc_softmax_loss(f, bank, idx, t), ref, rtol=1e-5)


def test_memory_bank_update_is_normalised_mix():
    bank = init_memory_bank(jax.random.key(0), 10, 4)
    np.testing.assert_allclose(np.linalg.norm(bank, axis=1), 1.0, rtol=1e-5)
    f = normalise(jnp.asarray(RNG.normal(size=(2, 4)), jnp.float32))
    new = update_memory_bank(bank, jnp.array([2, 7]), f)
    for row, i in zip(f, (2, 7)):
        mix = 0.5 * np.asarray(bank[i]) + 0.5 * np.asarray(row)
        np.testing.assert_allclose(new[i], mix / np.linalg.norm(mix), rtol=1e-5)
    untouched = np.array([i for i in range(10) if i not in (2, 7)])
    np.testing.assert_array_equal(new[untouched], bank[untouched])


def test_queue_wraps_around_and_enqueues_after_use():
    queue, ptr = init_queue(jax.random.key(0), 8, 3)
    np.testing.assert_allclose(np.linalg.norm(queue, axis=1), 1.0, rtol=1e-5)
    assert int(ptr) == 0
    step = jax.jit(enqueue)
    batches = [jnp.full((4, 3), float(i + 1)) for i in range(3)]
    q1, p1 = step(queue, ptr, batches[0])
    assert int(p1) == 4
    np.testing.assert_array_equal(q1[:4], batches[0])
    np.testing.assert_array_equal(q1[4:], queue[4:])
    q2, p2 = step(q1, p1, batches[1])
    assert int(p2) == 0  # wrapped
    q3, p3 = step(q2, p2, batches[2])
    assert int(p3) == 4
    np.testing.assert_array_equal(q3[:4], batches[2])  # oldest batch overwritten
    np.testing.assert_array_equal(q3[4:], batches[1])


def test_moco_order_keys_enter_the_queue_after_the_loss():
    """In a step the loss sees the queue before this batch's keys are added."""
    q_feat, k_feat = unit(4, 3).astype(np.float32), unit(4, 3).astype(np.float32)
    queue, ptr = init_queue(jax.random.key(1), 8, 3)

    def step(queue, ptr):
        loss = infonce_loss(q_feat, k_feat, queue, 0.1)
        queue, ptr = enqueue(queue, ptr, k_feat)
        return loss, queue, ptr

    loss, new_queue, _ = jax.jit(step)(queue, ptr)
    # jitted and eager: two float32 orders. Each logit is a 3-term dot of unit vectors
    # / 0.1, and InfoNCE is 2-Lipschitz in the logits; then a 9-term log-sum-exp and
    # the 4-query mean of positive losses (tests/tolerances.py)
    want = float(infonce_loss(q_feat, k_feat, queue, 0.1))
    tol = 2 * float32_sum_atol(3, 1 / 0.1) + float32_sum_atol(9 + 4, want)
    assert float(loss) == pytest.approx(want, abs=tol)
    assert float(loss) != pytest.approx(float(infonce_loss(q_feat, k_feat, new_queue, 0.1)),
                                        abs=tol)


def test_queue_size_not_divisible_or_too_small_is_rejected():
    queue, ptr = init_queue(jax.random.key(0), 10, 3)
    with pytest.raises(ValueError, match="divisible by the batch size 4"):
        enqueue(queue, ptr, jnp.zeros((4, 3)))
    with pytest.raises(ValueError, match=">= the batch size 16"):
        enqueue(queue, ptr, jnp.zeros((16, 3)))


def test_ema_is_exactly_m_k_plus_one_minus_m_q():
    k = {"w": jnp.asarray(RNG.normal(size=(5, 5)), jnp.float32)}
    q = {"w": jnp.asarray(RNG.normal(size=(5, 5)), jnp.float32)}
    for m in (0.0, 0.9, 0.99, 0.999, 1.0):
        got = ema_update(k, q, m)["w"]
        np.testing.assert_array_equal(got, m * k["w"] + (1 - m) * q["w"])


@pytest.mark.parametrize("call, match", [
    (lambda: infonce_loss(unit(2, 3), unit(2, 3), unit(4, 3), 0.0), "temperature"),
    (lambda: instdisc_softmax_loss(unit(2, 3), unit(4, 3), np.array([0, 1]), -1.0),
     "temperature"),
    (lambda: ema_update({"a": 1.0}, {"a": 2.0}, 1.5), "momentum must be in"),
    (lambda: ema_update({"a": 1.0}, {"a": 2.0}, -0.1), "momentum must be in"),
    (lambda: update_memory_bank(jnp.zeros((3, 2)), jnp.array([0]), jnp.ones((1, 2)), 2.0),
     "momentum must be in"),
    (lambda: infonce_loss(unit(2, 3), unit(2, 4), unit(4, 3), 0.1), "must be"),
])
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_log_z_estimate_is_stable_for_small_temperatures():
    f, bank = unit(4, 8).astype(np.float32), unit(30, 8).astype(np.float32)
    log_z = estimate_log_z(f, bank, np.arange(4), np.tile(np.arange(5), (4, 1)), 1e-3)
    assert np.isfinite(float(log_z)) and float(log_z) > math.log(30)


def test_split_batch_norm_matches_a_per_group_reference():
    from flax import nnx

    from ebm_jax.models.norm import SplitBatchNorm

    x = RNG.normal(size=(16, 3, 3, 5)).astype(np.float32) * 2 + 1
    bn = SplitBatchNorm(5, 4, momentum=0.9)
    bn.scale[...] = jnp.arange(1.0, 6.0)
    y = np.asarray(bn(jnp.asarray(x)))
    means, vars_ = [], []
    for g in range(4):
        grp = x[4 * g:4 * g + 4]
        mu, var = grp.mean(axis=(0, 1, 2)), grp.var(axis=(0, 1, 2))
        means.append(mu)
        vars_.append(var)
        ref = (grp - mu) / np.sqrt(var + 1e-5) * np.arange(1.0, 6.0)
        np.testing.assert_allclose(y[4 * g:4 * g + 4], ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(bn.mean[...], 0.1 * np.mean(means, 0), rtol=1e-5)
    np.testing.assert_allclose(bn.var[...], 0.9 + 0.1 * np.mean(vars_, 0), rtol=1e-5)
    # one split is ordinary training-mode batch norm
    one = SplitBatchNorm(5, 1)
    ref = nnx.BatchNorm(5, use_running_average=False, momentum=0.9, rngs=nnx.Rngs(0))
    np.testing.assert_allclose(one(jnp.asarray(x)), ref(jnp.asarray(x)), atol=1e-4)
    with pytest.raises(ValueError, match="divisible by num_splits 4"):
        bn(jnp.asarray(x[:6]))


def test_shuffled_batch_norm_on_four_devices_uses_per_device_statistics():
    from jax.sharding import PartitionSpec as P

    from ebm_jax.contrastive.shuffle_bn import (
        shuffle_across_devices,
        unshuffle_across_devices,
    )
    from ebm_jax.train import DATA_AXIS, make_mesh, shard_batch

    mesh = make_mesh(4)
    x = RNG.normal(size=(16, 3)).astype(np.float32) * 3
    key = jax.random.key(5)

    def encode(block, key, use_batch_stats):
        shuffled, perm = shuffle_across_devices(block, key, DATA_AXIS)
        if use_batch_stats:  # this device's own statistics
            mu, var = jnp.mean(shuffled, 0), jnp.var(shuffled, 0)
            out = (shuffled - mu) / jnp.sqrt(var + 1e-5)
        else:  # fixed statistics: the encoding does not depend on the grouping
            out = 2.0 * shuffled + 1.0
        return unshuffle_across_devices(out, perm, DATA_AXIS), perm

    outs = {}
    for stats in (True, False):
        f = jax.jit(jax.shard_map(partial(encode, use_batch_stats=stats), mesh=mesh,
                                  in_specs=(P(DATA_AXIS), P()),
                                  out_specs=(P(DATA_AXIS), P())))
        outs[stats] = f(shard_batch(x, mesh), key)
    # fixed statistics: keys equal the unshuffled encoding, in the original order
    np.testing.assert_allclose(outs[False][0], 2.0 * x + 1.0, rtol=1e-6)
    # batch statistics: each example normalised with the stats of the device block it
    # was shuffled into, not with the global ones
    y, perm = np.asarray(outs[True][0]), np.asarray(outs[True][1])
    assert sorted(perm.tolist()) == list(range(16)) and not np.array_equal(perm, np.arange(16))
    ref = np.empty_like(x)
    for d in range(4):
        members = perm[4 * d:4 * d + 4]
        mu, var = x[members].mean(0), x[members].var(0)
        ref[members] = (x[members] - mu) / np.sqrt(var + 1e-5)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    global_bn = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5)
    assert not np.allclose(y, global_bn, atol=1e-2)


class _TinyEncoder:
    """conv -> split batch norm -> relu -> mean pool -> linear(8) -> L2 normalise."""

    def __new__(cls, rngs):
        from flax import nnx

        from ebm_jax.models import SplitBatchNorm

        class Tiny(nnx.Module):
            def __init__(self, rngs):
                self.conv = nnx.Conv(3, 4, (3, 3), rngs=rngs)
                self.bn = SplitBatchNorm(4, 2)
                self.fc = nnx.Linear(4, 8, rngs=rngs)

            def __call__(self, x):
                h = jax.nn.relu(self.bn(self.conv(x))).mean(axis=(1, 2))
                return normalise(self.fc(h))

        return Tiny(rngs)


def test_moco_step_order_ema_queue_and_frozen_key_encoder():
    import optax
    from flax import nnx

    from ebm_jax.contrastive import make_moco_loss
    from ebm_jax.models.contrastive import QUERY_PARAMS, MoCo
    from ebm_jax.ops.augment import moco_v2_augment
    from ebm_jax.train import create_train_state, make_mesh, make_train_step, replicate

    m, batch, size = 0.9, 4, 12
    model = MoCo(_TinyEncoder, queue_size=12, dim=8, rngs=nnx.Rngs(0))
    opt = optax.sgd(0.5, momentum=0.9)
    graphdef, state = create_train_state(model, opt, jax.random.key(0), trainable=QUERY_PARAMS)
    leaves = lambda tree: [np.asarray(a) for a in jax.tree.leaves(tree)]  # noqa: E731
    # the optimizer sees the query encoder only: conv, bn and fc kernels/biases
    assert len(leaves(state.params)) == 6 and set(state.params.keys()) == {"query"}
    loss_fn = make_moco_loss(momentum=m, temperature=0.2, augment=moco_v2_augment,
                             image_size=size, shuffle="batch")
    step = make_train_step(graphdef, loss_fn, opt, make_mesh(1), trainable=QUERY_PARAMS,
                           donate=False)
    images = jnp.asarray(RNG.uniform(size=(batch, 16, 16, 3)), jnp.float32)
    s0 = replicate(state, make_mesh(1))
    s1, m1 = step(s0, images)
    s2, m2 = step(s1, images)
    key_of = lambda s: nnx.state(nnx.merge(graphdef, s.params, s.rest).key_encoder,  # noqa
                                 nnx.Param)
    query_of = lambda s: nnx.state(nnx.merge(graphdef, s.params, s.rest).query,  # noqa
                                   nnx.Param)
    # the key encoder starts as a copy; step 1 sets it to m k0 + (1-m) q0 = q0, step 2 to
    # m q0 + (1-m) q1: the EMA comes first and uses the query before its update
    for k1, q0 in zip(leaves(key_of(s1)), leaves(query_of(s0))):
        np.testing.assert_allclose(k1, q0, rtol=1e-6)
    for k2, q0, q1 in zip(leaves(key_of(s2)), leaves(query_of(s0)), leaves(query_of(s1))):
        np.testing.assert_allclose(k2, m * q0 + (1 - m) * q1, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, b) for a, b in zip(leaves(query_of(s0)),
                                                       leaves(query_of(s1))))
    # keys enter the queue after use, pointer advances by the batch and wraps
    mo = [nnx.merge(graphdef, s.params, s.rest) for s in (s0, s1, s2)]
    assert [int(x.pointer[...]) for x in mo] == [0, 4, 8]
    q0, q2 = np.asarray(mo[0].queue[...]), np.asarray(mo[2].queue[...])
    assert not np.allclose(q0[:8], q2[:8]) and np.array_equal(q0[8:], q2[8:])
    np.testing.assert_allclose(np.linalg.norm(q2, axis=1), 1.0, rtol=1e-5)
    assert np.isfinite(float(m1["loss"])) and 0.0 <= float(m2["accuracy"]) <= 1.0


def test_moco_bad_settings():
    from ebm_jax.contrastive import make_moco_loss
    from ebm_jax.ops.augment import moco_v1_augment

    kw = dict(augment=moco_v1_augment, image_size=8)
    with pytest.raises(ValueError, match="momentum must be in"):
        make_moco_loss(momentum=1.2, temperature=0.1, **kw)
    with pytest.raises(ValueError, match="temperature"):
        make_moco_loss(momentum=0.9, temperature=0.0, **kw)
    with pytest.raises(ValueError, match="shuffle must be one of"):
        make_moco_loss(momentum=0.9, temperature=0.1, shuffle="global", **kw)
    with pytest.raises(ValueError, match="needs axis_name"):
        make_moco_loss(momentum=0.9, temperature=0.1, shuffle="devices", **kw)


def test_instdisc_step_fixes_z_after_the_first_batch_and_writes_the_bank():
    import optax
    from flax import nnx

    from ebm_jax.contrastive import make_instdisc_loss
    from ebm_jax.models.contrastive import ENCODER_PARAMS, InstDisc
    from ebm_jax.train import create_train_state, make_mesh, make_train_step

    model = InstDisc(_TinyEncoder(nnx.Rngs(0)), num_items=20, dim=8, rngs=nnx.Rngs(1))
    opt = optax.sgd(0.1)
    graphdef, state = create_train_state(model, opt, jax.random.key(0),
                                         trainable=ENCODER_PARAMS)
    assert set(state.params.keys()) == {"encoder"}
    step = make_train_step(graphdef, make_instdisc_loss(num_noise=6, temperature=0.1), opt,
                           make_mesh(1), trainable=ENCODER_PARAMS, donate=False)
    images = jnp.asarray(RNG.uniform(size=(4, 8, 8, 3)), jnp.float32)
    idx = jnp.array([3, 7, 11, 19])
    s1, m1 = step(state, (images, idx))
    s2, m2 = step(s1, (images, jnp.array([0, 1, 2, 3])))
    assert np.isnan(float(nnx.merge(graphdef, state.params, state.rest).log_z[...]))
    assert np.isfinite(float(m1["log_z"])) and float(m2["log_z"]) == float(m1["log_z"])
    b0, b1 = (np.asarray(nnx.merge(graphdef, s.params, s.rest).bank[...]) for s in (state, s1))
    changed = np.where(np.any(b0 != b1, axis=1))[0]
    assert changed.tolist() == [3, 7, 11, 19]
    np.testing.assert_allclose(np.linalg.norm(b1, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match="kind must be one of"):
        make_instdisc_loss(kind="full")


def test_end_to_end_loss_equals_numpy():
    from ebm_jax.contrastive import end_to_end_loss

    rng = np.random.default_rng(0)
    q = rng.normal(size=(6, 4))
    k = rng.normal(size=(6, 4))
    logits = q @ k.T / 0.2
    m = logits.max(1, keepdims=True)
    want = np.mean(np.log(np.exp(logits - m).sum(1)) + m[:, 0] - np.diag(logits))
    np.testing.assert_allclose(end_to_end_loss(jnp.asarray(q), jnp.asarray(k), 0.2), want,
                               rtol=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        end_to_end_loss(jnp.asarray(q), jnp.asarray(k), 0.0)


def test_end_to_end_shuffled_keys_come_back_in_order():
    """shuffle=True sends the keys through the encoder permuted and restores the order:
    with a row-wise encoder the loss equals the unshuffled one; with batch norm in
    groups it does not (a query and its key sit in different groups)."""
    from flax import nnx

    from ebm_jax.contrastive import make_end_to_end_loss
    from ebm_jax.models import SplitBatchNorm

    class Encoder(nnx.Module):
        def __init__(self, norm: bool):
            self.fc = nnx.Linear(16, 8, rngs=nnx.Rngs(0))
            self.bn = SplitBatchNorm(8, 2, rngs=nnx.Rngs(0)) if norm else None

        def __call__(self, x):
            z = self.fc(x.reshape(x.shape[0], -1))
            z = z if self.bn is None else self.bn(z)
            return z / jnp.linalg.norm(z, axis=-1, keepdims=True)

    def jitter(key, image, size):
        return image + 0.1 * jax.random.normal(key, image.shape)

    images = jnp.asarray(np.random.default_rng(0).random((8, 4, 4, 1), np.float32))
    key = jax.random.key(3)
    losses = {}
    for norm in (False, True):
        for shuffle in (False, True):
            model = nnx.Module()
            model.encoder = Encoder(norm)
            fn = make_end_to_end_loss(temperature=0.2, augment=jitter, image_size=4,
                                      shuffle=shuffle)
            losses[norm, shuffle] = float(fn(model, images, key)[0])
    # Shuffled or not: two programs, so two float32 orders of the same arithmetic. The
    # bound, from the views the loss draws (keys split as in `make_end_to_end_loss`): a
    # Linear output within float32_sum_atol(17, |x| |W| + |b|) (tests/tolerances.py), a
    # unit feature within 2 |dz| / |z| plus its norm's and division's roundings, a logit
    # q.k / t within (|dq| + |dk|) / t plus its 8-term dot product's rounding, and a row's
    # log-sum-exp minus its diagonal within twice that plus its own rounding (8 exps of
    # spread <= 2 / t, |lse| <= 1 / t + log 8); each side within it of the exact value.
    from ebm_jax.ops.augment import augment_batch

    t = 0.2
    fc = Encoder(False).fc  # the weights of every Encoder(False) above (Rngs(0))
    w, b = np.asarray(fc.kernel[...], np.float64), np.asarray(fc.bias[...], np.float64)
    d_feat = []
    for k_view in jax.random.split(key, 3)[:2]:
        x = np.asarray(augment_batch(jitter, k_view, images, size=4), np.float64)
        x = x.reshape(len(x), -1)
        d_z = float32_sum_atol(17, np.abs(x) @ np.abs(w) + np.abs(b))
        d_feat.append(np.max(2 * np.linalg.norm(d_z, axis=1)
                             / np.linalg.norm(x @ w + b, axis=1)) + float32_sum_atol(11, 1))
    d_logit = sum(d_feat) / t + float32_sum_atol(8, 1 / t)
    side = (2 * d_logit + float32_sum_atol(8 + 4, 1 + 2 / t + 1 / t + np.log(8))
            + float32_sum_atol(8, abs(losses[False, False])))
    assert abs(losses[False, True] - losses[False, False]) <= 2 * side
    assert abs(losses[True, True] - losses[True, False]) > max(1e-4, 100 * side)


def test_mechanisms_share_their_batch_norm_groups():
    from ebm_jax.recipes.contrastive_stages import bn_groups

    for devices, want in ((1, {"moco": 4, "end-to-end": 4, "memory-bank": 4}),
                          (2, {"moco": 1, "end-to-end": 2, "memory-bank": 2})):
        assert {m: bn_groups(m, 4, devices) for m in want} == want
    # MoCo's per-device step normalises one shard per device: 1 group of batch / 2,
    # the same groups as the other two's 2 groups of the global batch
    assert bn_groups("instdisc", 4, 1) == bn_groups("supervised", 4, 2) == 1


def test_memory_bank_infonce_kind_equals_numpy():
    from flax import nnx

    from ebm_jax.contrastive import make_instdisc_loss
    from ebm_jax.models.contrastive import InstDisc

    class Identity(nnx.Module):
        def __call__(self, x):
            return x / jnp.linalg.norm(x, axis=-1, keepdims=True)

    model = InstDisc(Identity(), num_items=10, dim=3, rngs=nnx.Rngs(0))
    bank = np.asarray(model.bank[...])
    x = np.random.default_rng(1).normal(size=(2, 3)).astype(np.float32)
    idx = np.array([4, 7])
    loss_fn = make_instdisc_loss(temperature=0.5, num_noise=5, kind="infonce")
    key = jax.random.key(3)
    loss, _ = loss_fn(model, (jnp.asarray(x), jnp.asarray(idx)), key)
    noise = np.asarray(jax.random.randint(jax.random.split(key)[1], (2, 5), 0, 10))
    f = x / np.linalg.norm(x, axis=1, keepdims=True)
    want = []
    for i in range(2):
        s = bank[np.concatenate([[idx[i]], noise[i]])] @ f[i] / 0.5
        want.append(np.log(np.exp(s).sum()) - s[0])
    np.testing.assert_allclose(loss, np.mean(want), rtol=1e-5)


def test_supervised_loss_is_cross_entropy_on_augmented_views():
    from flax import nnx

    from ebm_jax.contrastive import make_supervised_loss
    from ebm_jax.ops.augment import augment_batch, digits_augment

    class Model(nnx.Module):
        def __init__(self):
            self.encoder = lambda x: x.reshape(x.shape[0], -1)[:, :3]
            self.classifier = lambda h: h

    images = jnp.asarray(RNG.uniform(size=(4, 8, 8, 1)), jnp.float32)
    labels = jnp.array([0, 1, 2, 1])
    key = jax.random.key(0)
    loss, metrics = make_supervised_loss(augment=digits_augment, image_size=8)(
        Model(), (images, labels), key)
    logits = np.asarray(augment_batch(digits_augment, key, images, size=8)).reshape(4, -1)
    logits = logits[:, :3]
    ref = np.mean([np.log(np.exp(r).sum()) - r[y] for r, y in zip(logits, labels)])
    np.testing.assert_allclose(loss, ref, rtol=1e-5)
    assert 0.0 <= float(metrics["accuracy"]) <= 1.0


class _TinyBNEncoder:
    """Flatten -> Linear -> BatchNorm -> Linear -> L2 normalise: batch norm without a
    ResNet's compile time."""

    def __new__(cls, rngs):
        from flax import nnx

        class Tiny(nnx.Module):
            def __init__(self, rngs):
                self.fc1 = nnx.Linear(64, 16, rngs=rngs)
                self.bn = nnx.BatchNorm(16, rngs=rngs)
                self.fc2 = nnx.Linear(16, 8, rngs=rngs)

            def __call__(self, x):
                z = self.fc2(jax.nn.relu(self.bn(self.fc1(x.reshape(x.shape[0], -1)))))
                return z / jnp.linalg.norm(z, axis=-1, keepdims=True)

        return Tiny(rngs)


def test_moco_step_with_batch_norm_shuffled_across_devices():
    """Per-device MoCo step (shard_map): batch statistics per device, the queue
    gathered as a replicated value, identical on every device."""
    import optax
    from flax import nnx
    from jax.sharding import PartitionSpec as P

    from ebm_jax.contrastive import gather_replicated, make_moco_loss
    from ebm_jax.ops.augment import digits_augment
    from ebm_jax.models.contrastive import QUERY_PARAMS, MoCo
    from ebm_jax.train import (
        DATA_AXIS,
        create_train_state,
        make_mesh,
        make_train_step,
        replicate,
    )

    mesh = make_mesh(4)
    x = jnp.arange(8.0 * 3).reshape(8, 3)
    got = jax.jit(jax.shard_map(lambda a: gather_replicated(a, DATA_AXIS), mesh=mesh,
                                in_specs=P(DATA_AXIS), out_specs=P()))(x)
    np.testing.assert_array_equal(got, x)

    model = MoCo(_TinyBNEncoder, queue_size=32, dim=8, rngs=nnx.Rngs(0))
    opt = optax.sgd(0.01)
    graphdef, state = create_train_state(model, opt, jax.random.key(0),
                                         trainable=QUERY_PARAMS)
    loss = make_moco_loss(momentum=0.9, temperature=0.2, augment=digits_augment,
                          image_size=8, shuffle="devices", axis_name=DATA_AXIS)
    step = make_train_step(graphdef, loss, opt, mesh, trainable=QUERY_PARAMS,
                           per_device=True, fold_device_key=False)
    state = replicate(state, mesh)
    images = np.random.default_rng(0).random((16, 8, 8, 1), np.float32)
    state, metrics = step(state, images)
    assert np.isfinite(float(metrics["loss"]))
    m = nnx.merge(graphdef, state.params, state.rest)
    assert int(m.pointer[...]) == 16
    assert not np.allclose(m.query.bn.mean[...], 0.0)  # statistics were updated
    for leaf in jax.tree.leaves(state.rest):  # one value on every device
        shards = [np.asarray(s.data) for s in leaf.addressable_shards]
        for s in shards[1:]:
            np.testing.assert_array_equal(s, shards[0])


def test_moco_devices_draw_their_own_augmentations():
    """With BN shuffled across devices the step key is shared (the permutation must
    agree), but each device augments its own slot with its own keys: identical images
    on two devices give different keys in the queue."""
    import optax
    from flax import nnx

    from ebm_jax.contrastive import make_moco_loss
    from ebm_jax.models.contrastive import QUERY_PARAMS, MoCo
    from ebm_jax.train import (
        DATA_AXIS,
        create_train_state,
        make_mesh,
        make_train_step,
        replicate,
    )

    class Linear(nnx.Module):
        def __init__(self, rngs):
            self.fc = nnx.Linear(16, 8, rngs=rngs)

        def __call__(self, x):
            z = self.fc(x.reshape(x.shape[0], -1))
            return z / jnp.linalg.norm(z, axis=-1, keepdims=True)

    def noise(key, image, size):  # the augmentation is the key made visible
        return image + jax.random.normal(key, image.shape)

    mesh = make_mesh(2)
    model = MoCo(Linear, queue_size=16, dim=8, rngs=nnx.Rngs(0))
    opt = optax.sgd(0.0)
    graphdef, state = create_train_state(model, opt, jax.random.key(0), trainable=QUERY_PARAMS)
    loss = make_moco_loss(momentum=1.0, temperature=0.2, augment=noise, image_size=4,
                          shuffle="devices", axis_name=DATA_AXIS)
    step = make_train_step(graphdef, loss, opt, mesh, trainable=QUERY_PARAMS,
                           per_device=True, fold_device_key=False)
    images = np.ones((8, 4, 4, 1), np.float32)  # slots 0-3 on device 0, 4-7 on device 1
    state, _ = step(replicate(state, mesh), images)
    queue = np.asarray(nnx.merge(graphdef, state.params, state.rest).queue[...])
    keys = queue[:8]  # (K, D): the 8 keys just enqueued, in slot order
    assert not np.allclose(keys[:4], keys[4:], atol=1e-3)  # devices drew differently
    assert not np.allclose(keys[0], keys[1], atol=1e-3)  # and so did slots


def test_losses_import_neither_models_nor_training():
    import ast
    from pathlib import Path

    import ebm_jax.contrastive as pkg

    for path in Path(pkg.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
                    a.name for a in node.names]
                for n in names:
                    assert not n.startswith(("ebm_jax.train", "ebm_jax.models")), (path, n)
