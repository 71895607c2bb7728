"""Whether a tracking backbone still localises its target: diagnostics over feature maps
of context regions, for the tables that train one from points (SoCL, Wu & Chan,
"Learning Tracking Representations from Single Point Annotations") and must say why a
row moves. Each is a pure NumPy function of feature maps (N, H, W, C), target masks
(N, H, W) bool (the cells inside the true box, `ebm_jax.tracking.top_maps.box_cells`)
and TOP maps (N, H, W):

    cell_uniformity(f)                    # cosine of each cell to the map's mean cell
    r = response_map(f_j, template(f_i, mask_i))   # cosine of each cell to a template
    response_contrast(r, mask_j)          # (target mean - background mean) / sd
    identification_hits(r, mask_j)        # the best cell is a target cell
    target_cells_in_sns_pool(h, mask, theta_b)     # target cells the SNS may pool
    pair_similarities(f_i, f_j, h_i, h_j, video, settings)  # SoCL's positive vs
                                                           # hardest negative
    scene_shortcut(f_i, f_j, mask_i, mask_j, h_i, h_j, video)  # are the videos told
                                                   # apart by the target or the scene?

`diagnose` gathers them over pairs of regions (frame i, frame j of one video).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ebm_jax.contrastive.socl import SoCLSettings, socl_loss_with_draws, top_mass_mask

__all__ = ["background_maps", "cell_uniformity", "diagnose", "identification_hits",
           "pair_similarities", "response_contrast", "response_map", "scene_shortcut",
           "target_cells_in_sns_pool", "template"]

_EPS = 1e-12


def _maps(name: str, x, ndim: int) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != ndim or min(x.shape) < 1:
        raise ValueError(f"{name} must be a {ndim}-D array with no empty axis, got shape "
                         f"{x.shape}")
    return x


def _masks(mask, shape) -> np.ndarray:
    mask = np.asarray(mask, bool)
    if mask.shape != tuple(shape):
        raise ValueError(f"target_mask must be {tuple(shape)}, got {mask.shape}")
    return mask


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), _EPS)


def cell_uniformity(features) -> np.ndarray:
    """(N,) the mean over the cells of each map of the cosine between a cell's feature
    and the map's mean feature: 1 where every cell is alike (a collapsed map, which
    cannot tell the target from the background), 1 / sqrt(L) for L orthogonal cells of
    equal norm; 0 where the mean is 0."""
    f = _maps("features", features, 4).astype(np.float64)
    f = f.reshape(len(f), -1, f.shape[-1])
    mean = f.mean(axis=1, keepdims=True)
    return np.mean(np.sum(_unit(f) * _unit(mean), axis=-1), axis=1)


def template(features, target_mask) -> np.ndarray:
    """(N, C) unit templates: the mean feature of each map's target cells (the GST of
    eq. 1 with uniform weights on the true box's cells)."""
    f = _maps("features", features, 4).astype(np.float64)
    m = _masks(target_mask, f.shape[:3]).astype(np.float64)
    if not np.all(m.sum(axis=(1, 2)) > 0):
        raise ValueError("every target_mask must hold at least one cell")
    return _unit(np.einsum("nhwc,nhw->nc", f, m) / m.sum(axis=(1, 2))[:, None])


def response_map(features, templates) -> np.ndarray:
    """(N, H, W): the cosine of each cell's feature with its map's template (N, C)."""
    f = _maps("features", features, 4).astype(np.float64)
    z = np.asarray(templates, np.float64)
    if z.shape != (len(f), f.shape[-1]):
        raise ValueError(f"templates must be {(len(f), f.shape[-1])}, got {z.shape}")
    return np.einsum("nhwc,nc->nhw", _unit(f), _unit(z))


def response_contrast(response, target_mask) -> np.ndarray:
    """(N,) (mean response on the target cells - mean on the others) / the sd of the
    response over all cells (population sd): how far the target stands out of its
    background, in units of the map's spread. 0 for a flat map; NaN where a map has no
    target or no background cell."""
    r = _maps("response", response, 3).astype(np.float64)
    m = _masks(target_mask, r.shape)
    t, b = m.sum(axis=(1, 2)), (~m).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = (np.where(m, r, 0).sum((1, 2)) / t) - (np.where(m, 0, r).sum((1, 2)) / b)
        sd = r.reshape(len(r), -1).std(axis=1)
        out = np.where(sd > _EPS, diff / np.maximum(sd, _EPS), 0.0)
    return np.where((t > 0) & (b > 0), out, np.nan)


def identification_hits(response, target_mask) -> np.ndarray:
    """(N,) bool: the cell of highest response is a target cell (target-versus-background
    identification; ties: the first cell in row-major order)."""
    r = _maps("response", response, 3)
    m = _masks(target_mask, r.shape).reshape(len(r), -1)
    best = np.argmax(r.reshape(len(r), -1), axis=1)
    return m[np.arange(len(r)), best]


def target_cells_in_sns_pool(h, target_mask, theta_b) -> np.ndarray:
    """(N,) the fraction of each map's target cells left outside the cells that hold
    theta_b of its TOP mass (SoCL eqs. 5-6: those the soft negative sample may pool).
    0: the TOP map covers the target; 1: the SNS may pool the whole target."""
    h = _maps("h", h, 3)
    m = _masks(target_mask, h.shape).reshape(len(h), -1)
    if not np.all(m.sum(axis=1) > 0):
        raise ValueError("every target_mask must hold at least one cell")
    masked = np.asarray(top_mass_mask(np.asarray(h, np.float32).reshape(len(h), -1),
                                      theta_b))
    return (m & ~masked).sum(axis=1) / m.sum(axis=1)


def pair_similarities(features_i, features_j, h_i, h_j, video,
                      settings: SoCLSettings = SoCLSettings()) -> dict:
    """SoCL's positive and hardest negative on held-out pairs: the pairs are grouped
    into batches of distinct videos (round r takes each video's r-th pair; a round of
    fewer than 2 videos is left out), and each batch gives `socl_loss_with_draws`'s
    metrics under `settings` without LSTs (mix-ups at the middle of mix_range): the
    mean cosine of the GSTs z_i, z_j of a pair ("positive"), of z_i with its most
    similar negative of N_ij ("hardest_negative"), and the fraction of queries whose
    positive beats every negative ("accuracy"), averaged over queries. None where no
    batch has 2 videos."""
    video = np.asarray(video).reshape(-1)
    f_i, f_j = np.asarray(features_i, np.float32), np.asarray(features_j, np.float32)
    if f_i.shape != f_j.shape or len(f_i) != len(video):
        raise ValueError(f"features_i and features_j must have one shape and one row per "
                         f"video id, got {f_i.shape}, {f_j.shape} and {video.shape}")
    s = dataclasses.replace(settings, use_lst=False)
    rounds: dict[int, list[int]] = {}
    seen: dict = {}
    for row, v in enumerate(video.tolist()):
        rounds.setdefault(seen.get(v, 0), []).append(row)
        seen[v] = seen.get(v, 0) + 1
    sums, queries = {"positive": 0.0, "hardest_negative": 0.0, "accuracy": 0.0}, 0
    for rows in rounds.values():
        if len(rows) < 2:
            continue
        n = len(rows)
        lam = np.full(2 * n, np.mean(s.mix_range), np.float32)
        _, metrics = socl_loss_with_draws(f_i[rows], f_j[rows], np.asarray(h_i)[rows],
                                          np.asarray(h_j)[rows], lam,
                                          np.ones(2 * n, np.float32), s)
        used = 2 * n if s.symmetric else n
        for key, name in (("positive", "positive_similarity"),
                          ("hardest_negative", "hardest_negative_similarity"),
                          ("accuracy", "accuracy")):
            sums[key] += float(metrics[name]) * used
        queries += used
    if not queries:
        return None
    return {k: v / queries for k, v in sums.items()} | {"queries": queries}


def background_maps(target_mask) -> np.ndarray:
    """(N, H, W) float32: each map uniform over the cells outside its target mask (a TOP
    map that sees only the scene around the target), 0 on the target. Every mask must
    leave at least one cell outside."""
    m = np.asarray(target_mask, bool)
    if m.ndim != 3 or min(m.shape) < 1:
        raise ValueError(f"target_mask must be a 3-D array with no empty axis, got shape "
                         f"{m.shape}")
    outside = (~m).reshape(len(m), -1).sum(axis=1)
    if not np.all(outside > 0):
        raise ValueError("every target_mask must leave at least one cell outside it")
    return ((~m) / outside[:, None, None]).astype(np.float32)


def _within_scene(f_i, f_j, h_i, h_j, video, scene, settings) -> float | None:
    """`pair_similarities`' accuracy with each query's negatives the other videos of its
    own scene only (the mean over the scenes with two videos or more, weighted by their
    queries); None where no scene has two."""
    hits = queries = 0
    for g in np.unique(scene):
        rows = scene == g
        r = pair_similarities(f_i[rows], f_j[rows], h_i[rows], h_j[rows], video[rows],
                              settings)
        if r is not None:  # None: a scene of one video
            hits, queries = hits + r["accuracy"] * r["queries"], queries + r["queries"]
    return hits / queries if queries else None


def scene_shortcut(features_i, features_j, mask_i, mask_j, h_i, h_j, video,
                   settings: SoCLSettings = SoCLSettings(), scene=None) -> dict | None:
    """Whether the scene tells the videos apart better than the target (SoCL's only
    negatives are other videos, Wu & Chan sec. 3.2, eq. 9: a backbone can solve it by
    the background). GST-only in-batch accuracy (`pair_similarities` without SNS,
    mix-ups or LSTs: Table 1's GST row, eqs. 2 and 9) of the same pairs, once with the
    TOP maps h ("target") and once with `background_maps` ("background"), on the pairs
    whose both regions have a cell outside the target ("pairs"). A background accuracy
    at or above the target's: the scene identifies the video at least as well. With
    `scene` (a scene id per pair: videos that share background and camera, the
    generator's scene groups) both are also measured against the videos of the query's
    own scene alone ("target_within_scene", "background_within_scene"; None without a
    scene of two videos): what the background tells apart once the scene is shared.
    None without two videos among those pairs."""
    f_i, f_j = _maps("features_i", features_i, 4), _maps("features_j", features_j, 4)
    m_i, m_j = (_masks(m, f_i.shape[:3]) for m in (mask_i, mask_j))
    video = np.asarray(video).reshape(-1)
    if scene is not None:
        scene = np.asarray(scene).reshape(-1)
        if scene.shape != video.shape:
            raise ValueError(f"scene must hold one id per pair ({len(video)}), got shape "
                             f"{scene.shape}")
    keep = ((~m_i).reshape(len(m_i), -1).any(axis=1)
            & (~m_j).reshape(len(m_j), -1).any(axis=1))
    if len(set(video[keep].tolist())) < 2:
        return None
    s = dataclasses.replace(settings, use_sns=False, use_mix=False, use_lst=False)
    f_i, f_j, video = f_i[keep], f_j[keep], video[keep]
    maps = {"target": (np.asarray(h_i)[keep], np.asarray(h_j)[keep]),
            "background": (background_maps(m_i[keep]), background_maps(m_j[keep]))}
    out = {"pairs": int(keep.sum())}
    for name, (a, b) in maps.items():
        out[name] = pair_similarities(f_i, f_j, a, b, video, s)["accuracy"]
        out[f"{name}_within_scene"] = (None if scene is None else
                                       _within_scene(f_i, f_j, a, b, video, scene[keep], s))
    return out


def diagnose(features_i, features_j, mask_i, mask_j, h_i, h_j, video,
             settings: SoCLSettings = SoCLSettings(), scene=None) -> dict:
    """The diagnostics of one backbone on P pairs of regions (frame i and frame j of
    video `video[p]`): the cells' uniformity (mean over both frames), the response
    contrast and identification accuracy on frame j of the template of frame i's
    target cells, SoCL's positive and hardest negative (`pair_similarities`; None
    without two videos), the GST-only accuracy by the target and by the background
    (`scene_shortcut`; None without two videos; also within each `scene` where given),
    and the pairs' count. Means over pairs."""
    f_i, f_j = _maps("features_i", features_i, 4), _maps("features_j", features_j, 4)
    r = response_map(f_j, template(f_i, mask_i))
    contrast = response_contrast(r, mask_j)
    sims = pair_similarities(f_i, f_j, h_i, h_j, video, settings)
    shortcut = scene_shortcut(f_i, f_j, mask_i, mask_j, h_i, h_j, video, settings, scene)
    return {"pairs": int(len(f_i)),
            "uniformity": float(np.mean(np.concatenate([cell_uniformity(f_i),
                                                        cell_uniformity(f_j)]))),
            "contrast": float(np.nanmean(contrast)) if np.isfinite(contrast).any()
            else None,
            "identification": float(np.mean(identification_hits(r, mask_j))),
            "positive": None if sims is None else sims["positive"],
            "hardest_negative": None if sims is None else sims["hardest_negative"],
            "pair_accuracy": None if sims is None else sims["accuracy"],
            **{f"{k}_accuracy": None if shortcut is None else shortcut[k]
               for k in ("target", "background", "target_within_scene",
                         "background_within_scene")}}
