"""Soft contrastive learning (SoCL) losses: Qiangqiang Wu and Antoni B. Chan, "Learning
Tracking Representations from Single Point Annotations", sec. 3.2 (eqs. 1-10).

Features f are (B, L, C) with L = H*W locations (a (B, H, W, C) map is flattened row-major),
TOP maps h are (B, L) or (B, H, W), each row non-negative and summing to 1:

    z      = gst(f, h)                    # eq. 1, global soft template
    mask   = top_mass_mask(h, theta)      # eqs. 5-7, locations holding theta of the mass
    z_hat  = sns(f, h, z, theta_b)        # eqs. 2-6, soft negative sample
    z_bar  = lst(f, h, theta_p)           # eqs. 7-8, local soft template
    loss, metrics = socl_loss(f_i, f_j, h_i, h_j, key, SoCLSettings())   # eqs. 9-10

All are pure, batched, jittable and differentiable. Argument checks run at the public
boundary on concrete values only: under `jax.jit` the TOP-map checks (non-negative rows
summing to 1) are skipped, and the caller validates the maps on the host.
"""

from __future__ import annotations

import dataclasses
import hashlib

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ebm_jax import checks

# Relative slack of the cumulative-mass test of eq. 5 (see `top_mass_mask`).
MASS_TOLERANCE = 1e-6


def purpose_id(purpose: str) -> int:
    """The 31-bit id `fold_in` takes for a named purpose: the same hash as
    `ebm_jax.train.stages.stable_hash`, recomputed here (losses import no training code)."""
    return int.from_bytes(hashlib.sha256(purpose.encode()).digest()[:4], "big") >> 1


MIXUP_PURPOSE = "socl/mixup_lambda"
LST_PURPOSE = "socl/lst_theta_p"


def _concrete(x) -> np.ndarray | None:
    """`x` as a NumPy array, or None when traced (inside jit or grad)."""
    try:
        return np.asarray(x)
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
        return None


def _check_theta(name: str, theta, batch: int) -> jax.Array:
    if (t := _concrete(theta)) is not None and (t.ndim > 1 or not np.all((t > 0) & (t <= 1))):
        raise ValueError(f"{name} must be in (0, 1] (a number or one per row), got {theta!r}")
    theta = jnp.asarray(theta)
    if theta.ndim > 1 or (theta.ndim == 1 and theta.shape[0] != batch):
        raise ValueError(f"{name} must have shape () or ({batch},), got {theta.shape}")
    return theta


def _top_map(name: str, h, length: int | None = None) -> jax.Array:
    """h as (B, L); non-negative rows summing to 1, checked when h is concrete."""
    h = jnp.asarray(h)
    if h.ndim == 3:
        h = h.reshape(h.shape[0], -1)
    if h.ndim != 2 or (length is not None and h.shape[1] != length):
        raise ValueError(f"{name} must be (B, {length or 'L'}) or (B, H, W), got {h.shape}")
    if (a := _concrete(h)) is not None:
        if np.any(checks.finite_array(name, a) < 0):
            raise ValueError(f"{name} must be non-negative, found {a.min()}")
        sums = a.sum(axis=-1, dtype=np.float64)
        if (bad := np.flatnonzero(np.abs(sums - 1) > 1e-3)).size:
            raise ValueError(f"each row of {name} must sum to 1, row {bad[0]} sums to "
                             f"{sums[bad[0]]}")
    return h


def _features(name: str, features) -> jax.Array:
    f = jnp.asarray(features)
    if f.ndim == 4:
        f = f.reshape(f.shape[0], -1, f.shape[-1])
    if f.ndim != 3:
        raise ValueError(f"{name} must be (B, L, C) or (B, H, W, C), got {jnp.shape(features)}")
    return f


def _check_videos(n: int) -> int:
    if n < 2:
        raise ValueError(f"features_i must hold N >= 2 videos (the other videos give the "
                         f"negatives), got N = {n}")
    return n


def _unit(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """x / max(|x|, eps) along the last axis, with a finite gradient at x = 0."""
    return x * jax.lax.rsqrt(jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), eps**2))


# --------------------------------------------------------------------------- equations


def _gst(f, h):
    return jnp.einsum("blc,bl->bc", f, h)


def gst(features, h) -> jax.Array:
    """(B, C) global soft templates z = f^T h (sec. 3.2.1, eq. 1)."""
    f = _features("features", features)
    return _gst(f, _top_map("h", h, f.shape[1]))


def _top_mass_mask(h, theta):
    order = jnp.argsort(-h, axis=-1, stable=True)            # descending, ties by index
    cum = jnp.cumsum(jnp.take_along_axis(h, order, axis=-1), axis=-1)
    total = cum[:, -1:]
    theta = jnp.reshape(jnp.asarray(theta, h.dtype), (-1, 1))
    reached = cum >= (theta - MASS_TOLERANCE) * total
    q_star = jnp.where(reached.any(-1), jnp.argmax(reached, axis=-1) + 1, h.shape[1])
    in_sorted = jnp.arange(h.shape[1])[None, :] < q_star[:, None]
    rows = jnp.arange(h.shape[0])[:, None]
    return jnp.zeros(h.shape, bool).at[rows, order].set(in_sorted)


def top_mass_mask(h, theta) -> jax.Array:
    """(B, L) bool: the target locations of the background selection s_b (sec. 3.2.2,
    eqs. 5-6) and of the target selection s_t (sec. 3.2.3, eq. 7).

    Each row of h is sorted in descending order (ties by location index, a stable sort)
    and the first q* sorted locations are selected, q* = min q such that the cumulative
    sum a_1 + ... + a_q >= theta (eq. 5). theta is () or (B,), in (0, 1]. The test is made
    against the row's own total S (S = 1 for a TOP map) with a relative slack:
    cumsum >= (theta - 1e-6) * S, so that theta = 1 is well defined under float rounding:
    it selects every location with positive mass (tail locations holding less than 1e-6
    of the mass, which float32 cannot add to the sum anyway, may be left out). Tiny theta
    selects the single highest location (q* >= 1 always).
    """
    h = _top_map("h", h)
    return _top_mass_mask(h, _check_theta("theta", theta, h.shape[0]))


def _sns(f, h, z, theta_b):
    g = jnp.einsum("blc,bc->bl", f, z)                          # eq. 2
    masked = _top_mass_mask(h, theta_b)                         # eqs. 5-6
    all_masked = masked.all(axis=-1, keepdims=True)
    peak = jnp.max(jnp.where(masked, -jnp.inf, g), axis=-1, keepdims=True)
    peak = jax.lax.stop_gradient(jnp.where(all_masked, 0.0, peak))
    e = jnp.where(masked, 0.0, jnp.exp(jnp.where(masked, peak, g) - peak))  # softmax, eq. 3
    w = e / jnp.where(all_masked, 1.0, jnp.sum(e, axis=-1, keepdims=True))
    w = jnp.where(all_masked, 1.0 / h.shape[1], w)
    return jnp.einsum("blc,bl->bc", f, w)                       # eqs. 3-4


def sns(features, h, z, theta_b) -> jax.Array:
    """(B, C) soft negative samples (sec. 3.2.2, eqs. 2-6).

    g = f z is the similarity of every location with the template z (eq. 2); the
    locations holding theta_b of the TOP mass (`top_mass_mask`, eq. 5) are set to -inf
    (s_b, eq. 6); the softmax of the rest weights the features (eqs. 3-4). When every
    location is masked (theta_b = 1 with a TOP map that is positive everywhere, as a
    softmax map is) the paper's softmax is undefined: we then weight all locations
    uniformly (the SNS is the mean feature of the frame), finite in value and gradient.
    """
    f = _features("features", features)
    h = _top_map("h", h, f.shape[1])
    z = jnp.asarray(z)
    if z.shape != (f.shape[0], f.shape[2]):
        raise ValueError(f"z must be (B, C) = {(f.shape[0], f.shape[2])}, got {z.shape}")
    return _sns(f, h, z, _check_theta("theta_b", theta_b, f.shape[0]))


def _lst(f, h, theta_p):
    kept = jnp.where(_top_mass_mask(h, theta_p), h, 0.0)        # s_t, eq. 7
    total = jnp.sum(kept, axis=-1, keepdims=True)
    return _gst(f, kept / jnp.where(total > 0, total, 1.0))     # psi and eq. 8


def lst(features, h, theta_p) -> jax.Array:
    """(B, C) local soft templates (sec. 3.2.3, eqs. 7-8): h kept at the locations
    holding theta_p of its mass (`top_mass_mask`), 0 elsewhere, divided by its sum (psi),
    then z_bar = f^T psi(s_t(h)). theta_p: () or (B,) in (0, 1]; theta_p = 1 is the GST.
    """
    f = _features("features", features)
    return _lst(f, _top_map("h", h, f.shape[1]), _check_theta("theta_p", theta_p, len(f)))


def _mixup(z, candidates, lam):
    _, idx = jax.lax.top_k(z @ candidates.T, 2)                 # ties: lower index first
    lam = jnp.reshape(jnp.asarray(lam, z.dtype), (-1, 1))
    return lam * candidates[idx[:, 0]] + (1 - lam) * candidates[idx[:, 1]]


def mixup(z, candidates, lam) -> jax.Array:
    """(B, C) mix-up hard negatives (sec. 3.2.4, "Negative Sample Set"): for each query
    z_b its two hardest candidates (largest z_b . c; ties by index), mixed as
    lam * hardest + (1 - lam) * second. candidates: (M, C), M >= 2; lam: () or (B,).
    """
    z, candidates = jnp.asarray(z), jnp.asarray(candidates)
    if (z.ndim != 2 or candidates.ndim != 2 or candidates.shape[1] != z.shape[1]
            or candidates.shape[0] < 2):
        raise ValueError(f"z must be (B, C) and candidates (M, C) with M >= 2, got "
                         f"{z.shape}, {candidates.shape}")
    if jnp.ndim(lam) > 1 or (jnp.ndim(lam) == 1 and jnp.shape(lam)[0] != z.shape[0]):
        raise ValueError(f"lam must have shape () or ({z.shape[0]},), got {jnp.shape(lam)}")
    return _mixup(z, candidates, lam)


def _mixup_own_pair(queries, sns_all, lam, n):
    """Mix-ups of each query z (2N, C) from the 4 SNS of its own video (those of z_i[v]
    and z_j[v] on frames i and j; `sns_all` is (4N, C) in `socl_loss_with_draws`'s
    order, video v's at v, N + v, 2N + v, 3N + v)."""
    video = jnp.arange(queries.shape[0]) % n
    own = sns_all[video[:, None] + n * jnp.arange(4)[None, :]]          # (2N, 4, C)
    _, idx = jax.lax.top_k(jnp.einsum("bc,bkc->bk", queries, own), 2)  # ties: lower first
    pick = jnp.take_along_axis(own, idx[:, :, None], axis=1)           # (2N, 2, C)
    lam = jnp.reshape(jnp.asarray(lam, queries.dtype), (-1, 1))
    return lam * pick[:, 0] + (1 - lam) * pick[:, 1]


def _soft_contrastive_loss(z_q, z_pos, negatives, neg_mask, tau, include_positive):
    pos = jnp.sum(z_q * z_pos, axis=-1) / tau
    sims = (jnp.einsum("bc,bkc->bk", z_q, negatives) if negatives.ndim == 3
            else z_q @ negatives.T)
    neg = jnp.where(neg_mask, sims / tau, -jnp.inf)
    if include_positive:
        neg = jnp.concatenate([pos[:, None], neg], axis=1)
    return logsumexp(neg, axis=-1) - pos


def soft_contrastive_loss(z_q, z_pos, negatives, neg_mask, tau,
                          include_positive: bool = False) -> jax.Array:
    """(B,) contrastive loss of each query (sec. 3.2.4, eq. 9):

        -log exp(q . p / tau) / sum_{k: neg_mask[b, k]} exp(q . n_k / tau)

    in log-sum-exp form. As eq. 9 is written, the positive is not in the denominator, so
    the loss can be negative; include_positive=True adds it (the usual InfoNCE
    denominator). z_q, z_pos: (B, C); negatives: (K, C) shared or (B, K, C); neg_mask:
    (B, K) bool, each row with at least one True (checked when concrete); tau > 0, a
    Python number.
    """
    tau = checks.positive("tau", tau)
    z_q, z_pos, negatives = jnp.asarray(z_q), jnp.asarray(z_pos), jnp.asarray(negatives)
    neg_mask = jnp.asarray(neg_mask, bool)
    if (z_q.ndim != 2 or z_pos.shape != z_q.shape or negatives.ndim not in (2, 3)
            or negatives.shape[-1] != z_q.shape[1]
            or (negatives.ndim == 3 and negatives.shape[0] != z_q.shape[0])
            or neg_mask.shape != (z_q.shape[0], negatives.shape[-2])):
        raise ValueError(f"z_q and z_pos must be (B, C), negatives (K, C) or (B, K, C) and "
                         f"neg_mask (B, K), got {z_q.shape}, {z_pos.shape}, "
                         f"{negatives.shape}, {neg_mask.shape}")
    if (m := _concrete(neg_mask)) is not None and not include_positive and not m.any(1).all():
        raise ValueError("neg_mask must select at least one negative in every row")
    return _soft_contrastive_loss(z_q, z_pos, negatives, neg_mask, tau, include_positive)


# --------------------------------------------------------------------------- SoCL


@dataclasses.dataclass(frozen=True)
class SoCLSettings:
    """SoCL's hyperparameters (sec. 3.2 and 4, the paper's values as defaults).

    tau: temperature of eq. 9. theta_b: TOP mass masked out of the SNS (eq. 5). b_p:
    lower end of theta_p ~ U[b_p, 1) for the LSTs. use_sns / use_mix / use_lst: the
    Table 1 ablation switches (mix-ups need SNS: use_sns=False drops both). normalize:
    L2-normalise every embedding after its aggregation (the paper scores with dot
    products / tau, tau = 0.5, which presumes unit vectors). mix_range: lambda ~
    U[lo, hi), the paper's lambda in (0.5, 1). include_positive: see
    `soft_contrastive_loss`. Two choices the paper leaves open, as switches (the LST
    study on a validation split): symmetric, eq. 10 for the queries z_i and z_j (True)
    or, as printed, for z_i only (False, the default: the study's choice, +4.5 AUC over
    the symmetrised form beyond its error bars; the negative set is the same); mix_scope, each
    mix-up made of the two hardest of all 4N SNS of the batch ("batch") or of the 4 SNS
    of the query's own video pair ("pair").
    """

    tau: float = 0.5
    theta_b: float = 0.8
    b_p: float = 0.6
    use_sns: bool = True
    use_mix: bool = True
    use_lst: bool = True
    normalize: bool = True
    mix_range: tuple[float, float] = (0.5, 1.0)
    include_positive: bool = False
    symmetric: bool = False
    mix_scope: str = "batch"

    def __post_init__(self):
        checks.positive("SoCLSettings.tau", self.tau)
        for name in ("theta_b", "b_p"):
            v = float(getattr(self, name))
            if not 0 < v <= 1:
                raise ValueError(f"SoCLSettings.{name} must be in (0, 1], got {v!r}")
        if self.mix_scope not in ("batch", "pair"):
            raise ValueError(f"SoCLSettings.mix_scope must be 'batch' or 'pair', got "
                             f"{self.mix_scope!r}")
        lo, hi = (float(v) for v in self.mix_range)
        if not 0.5 <= lo <= hi <= 1:
            raise ValueError("SoCLSettings.mix_range must be (lo, hi) with "
                             f"0.5 <= lo <= hi <= 1, got {self.mix_range!r}")


def num_negatives(n_videos: int, settings: SoCLSettings) -> int:
    """Size of the negative set N_ij of one pair: 2(N - 1) GSTs, + 4N SNS, + 2N mix-ups."""
    sns, mix = settings.use_sns, settings.use_sns and settings.use_mix
    return 2 * (n_videos - 1) + 4 * n_videos * sns + 2 * n_videos * mix


def socl_draws(key: jax.Array, n_videos: int, settings: SoCLSettings = SoCLSettings()):
    """(lam, theta_p), each (2N,): the mix-up factor of each GST query (z_i[0..N-1], then
    z_j[0..N-1]) and the theta_p of each LST (frame i of the videos, then frame j), drawn
    from fold_in(key, purpose) with the purposes MIXUP_PURPOSE and LST_PURPOSE."""
    lo, hi = settings.mix_range
    lam = jax.random.uniform(jax.random.fold_in(key, purpose_id(MIXUP_PURPOSE)),
                             (2 * n_videos,), minval=lo, maxval=hi)
    theta_p = jax.random.uniform(jax.random.fold_in(key, purpose_id(LST_PURPOSE)),
                                 (2 * n_videos,), minval=settings.b_p, maxval=1.0)
    return lam, theta_p


def socl_loss_with_draws(features_i, features_j, h_i, h_j, lam, theta_p,
                         settings: SoCLSettings = SoCLSettings()):
    """`socl_loss` with its random draws given: lam and theta_p, each (2N,) in the order
    of `socl_draws`."""
    f_i, f_j = _features("features_i", features_i), _features("features_j", features_j)
    if f_j.shape != f_i.shape:
        raise ValueError(f"features_i and features_j must have the same shape, got "
                         f"{f_i.shape} and {f_j.shape}")
    n, length = _check_videos(f_i.shape[0]), f_i.shape[1]
    h_i, h_j = _top_map("h_i", h_i, length), _top_map("h_j", h_j, length)
    for name, v, want in (("h_i", h_i, (n, length)), ("h_j", h_j, (n, length)),
                          ("lam", lam, (2 * n,)), ("theta_p", theta_p, (2 * n,))):
        if jnp.shape(v) != want:
            raise ValueError(f"{name} must be {want} (N = {n}), got {jnp.shape(v)}")
    _check_theta("theta_p", theta_p, 2 * n)
    s = settings
    unit = _unit if s.normalize else (lambda x: x)

    z_i, z_j = unit(_gst(f_i, h_i)), unit(_gst(f_j, h_j))              # eq. 1
    queries = jnp.concatenate([z_i, z_j])                               # (2N, C)
    parts = [queries]
    if s.use_sns:                                                       # eqs. 2-6
        sns_all = unit(jnp.concatenate([_sns(f, h, z, s.theta_b) for z in (z_i, z_j)
                                        for f, h in ((f_i, h_i), (f_j, h_j))]))  # (4N, C)
        parts.append(sns_all)
        if s.use_mix:
            mixed = (_mixup(queries, sns_all, lam) if s.mix_scope == "batch"
                     else _mixup_own_pair(queries, sns_all, lam, n))
            parts.append(unit(mixed))                                   # (2N, C)
    negatives = jnp.concatenate(parts)
    video = jnp.arange(2 * n) % n
    neg_mask = jnp.concatenate([video[:, None] != video[None, :],
                                jnp.ones((2 * n, len(negatives) - 2 * n), bool)], axis=1)

    def term(positives):                                                # eq. 9
        return _soft_contrastive_loss(queries, positives, negatives, neg_mask, s.tau,
                                      s.include_positive)

    per_query = term(z_pos := jnp.concatenate([z_j, z_i]))
    if s.use_lst:                                                       # eqs. 7-8, 10
        lst_i = unit(_lst(f_i, h_i, theta_p[:n]))
        lst_j = unit(_lst(f_j, h_j, theta_p[n:]))
        per_query = (per_query + term(jnp.concatenate([lst_j, lst_i]))
                     + term(jnp.concatenate([lst_i, lst_j])))

    pos_sim = jnp.sum(queries * z_pos, axis=-1)
    hardest = jnp.max(jnp.where(neg_mask, queries @ negatives.T, -jnp.inf), axis=-1)
    used = slice(None) if s.symmetric else slice(0, n)                  # the queries
    return jnp.mean(per_query[used]), {
        "positive_similarity": jnp.mean(pos_sim[used]),
        "hardest_negative_similarity": jnp.mean(hardest[used]),
        "accuracy": jnp.mean((pos_sim[used] > hardest[used]).astype(jnp.float32)),
        "num_negatives": jnp.asarray(num_negatives(n, s), jnp.float32)}


def socl_loss(features_i, features_j, h_i, h_j, key: jax.Array,
              settings: SoCLSettings = SoCLSettings()):
    """(loss, metrics) of SoCL on N videos (sec. 3.2.4, eqs. 9-10).

    features_i[n], features_j[n]: (N, L, C) or (N, H, W, C) features of two frames of
    video n; h_i, h_j: their TOP maps (N, L) or (N, H, W); N >= 2.

    - GSTs z_i[n], z_j[n] (eq. 1), L2-normalised when settings.normalize (as are all
      embeddings below, each right after its aggregation, the mix-ups included, as in
      MoCHi, the paper's ref. [24]).
    - SNS (eqs. 2-6): the query z_i[n] makes sns(f_i[n], h_i[n], z_i[n]) and
      sns(f_j[n], h_j[n], z_i[n]) (eq. 2 uses z_i on both frames); z_j[n] likewise: 4N.
    - Mix-ups: one per GST, of its two hardest among all 4N SNS (among the 4 of its own
      video with settings.mix_scope = "pair"), lam ~ U(mix_range): 2N.
    - N_ij of the pair of video n: the 2(N - 1) GSTs of the other videos, all 4N SNS and
      all 2N mix-ups: 8N - 2 (2N - 2 without SNS, 6N - 2 without mix-ups).
    - LSTs (eqs. 7-8), one per frame, theta_p ~ U[b_p, 1) drawn per LST.
    - Loss (eq. 10) of the query z_i[n]: L(z_i, z_j) + L(z_i, LST_j) + L(z_i, LST_i),
      each eq. 9 over N_ij (only L(z_i, z_j) without LSTs), the mean over the N
      queries z_i, as the paper states it (the default). With settings.symmetric =
      True, z_j[n] is a query too, with z_i[n], LST_i[n], LST_j[n] as its positives,
      and the loss is the mean over the 2N queries.

    Gradients flow through every sample, negatives included (end to end; the paper
    names no stop-gradient); the mix-up's choice of the two hardest is discrete.
    Randomness (`socl_draws`): lam and theta_p from fold_in(key, purpose). Metrics:
    positive (GST) similarity, hardest negative similarity, accuracy (the GST positive
    beats every negative), size of N_ij, each as a mean over the queries.
    """
    n = _check_videos(_features("features_i", features_i).shape[0])
    lam, theta_p = socl_draws(key, n, settings)
    return socl_loss_with_draws(features_i, features_j, h_i, h_j, lam, theta_p, settings)
