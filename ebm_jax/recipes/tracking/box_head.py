"""The box-head experiment of the tracking recipe (the EBM regression paper, sec. 5, Table 4): SiamFC's
own scale search (Box-Siam) against a box head per loss, trained on the same seed's
Box-Siam backbone (`box_head_stages.train_box_head`) and tracked by SiamFC's centre at one
scale refined on the head's energy. The refinement's centre and size step lengths (and
optionally the training sigmas) are chosen per loss on the validation split, the last
`validation_sequences` of the training split, which no arm trains on, by the refinement
probe: does the head raise the IoU of perturbed true boxes of targets it never saw
(`choose_box_head_settings`, `box_head_stages.probe_box_head`)? The chosen heads are then
probed on the test split, and the test split is tracked once per arm; the same trackers
without the refinement give the coarse FPS (`coarse_evaluation`).

`box_head_arms`, `choose_box_head_arms` and `coarse_evaluation` are the "box-head" row
of `ebm_jax.recipes.tracking.EXPERIMENTS`; every `cfg` is that recipe's Config.
"""

from __future__ import annotations

import dataclasses
import functools

from ebm_jax.recipes.tracking import stages as stages
from ebm_jax.recipes.tracking.box_head_stages import box_head_runner, probe_box_head, train_box_head
from ebm_jax.recipes.tracking.arms import Arm, Tracker, Trained
from ebm_jax.recipes.tracking.stages import box_siam_arm
from ebm_jax.tracking.box_head import BoxHeadSettings

__all__ = ["LOSS_PAIRS", "TRACKER_CHOICES", "best_candidate", "box_head_arms",
           "choose_box_head_arms", "choose_box_head_settings", "choose_tracker_options",
           "coarse_evaluation"]

# The tracker options compared on the validation split (`tracker_choices`), by tracking
# AUC, once the refinement's step lengths are chosen: SiamFC's centre and the head's
# size and centre; the head's size only (SiamFC's centre kept); a refined box taken only
# where the head prefers it to the coarse one (f(refined) - f(coarse) > 0); the size
# only, moved half-way (damped, in log space). Values of `BoxHeadSettings`' fields.
TRACKER_CHOICES = {
    "centre+size": {},
    "size-only": {"refine_center": False},
    "accept-if-f-rises": {"accept_margin": 0.0},
    "size-only-damped": {"refine_center": False, "size_update": 0.5},
    # no refinement on a frame whose SiamFC peak is below half the best so far
    "skip-if-lost": {"lost_ratio": 0.5},
}


def train_box_head_arm(env: stages.TrackingRun, seed: int, used, *,
                       settings: BoxHeadSettings, prefix_steps: int | None = None
                       ) -> Trained:
    """The box head of `settings` (its loss: `settings.method`) on the same seed's
    Box-Siam backbone (frozen unless `box_head_joint`), trained on the training split
    less the validation split (`box_head_stages.train_box_head`; `prefix_steps`: the
    finished shorter stage of the same head it continues)."""
    box, joint = used["box-siam"], env.cfg.box_head_joint
    # the refinement's step lengths are chosen after training, on heads trained with
    # the config's (`choose_box_head_settings`): the head of the chosen settings is
    # that stage, whatever step lengths it is then tracked with
    settings = dataclasses.replace(settings, step_lengths=env.cfg.box_head.step_lengths)
    sequences, identity = stages.training_split(env.data, env.cfg)
    sigmas = "" if settings.sigmas == env.cfg.box_head.sigmas else "-sigmas" + "_".join(
        f"{x:g}" for x in settings.sigmas)
    t = train_box_head(env.ctx, sequences, data_identity=identity, backbone=box.model,
                       backbone_identity=box.identity["trained"], settings=settings,
                       joint=joint, siamfc=stages.SIAMFC,
                       name=f"box-head-{settings.method}{sigmas}"
                            f"{'-joint' if joint else ''}-s{seed}",
                       prefix_steps=prefix_steps)
    return Trained(t.net, {"trained": t.identity}, t.figures, t.name)


def box_head_tracker(settings: BoxHeadSettings) -> Tracker:
    """SiamFC's centre (one scale) refined by the box head of `settings`."""
    return Tracker("box-head", settings, box_head_runner)


# The EBM regression paper's Table 4, AUC (Success on TrackingNet) %: DiMP-KLD-IS /
# DiMP-NCE / DiMP-NCE+ per dataset: the reference of both of its configs
# (ebm_table4_box_head.py on SiamFC's centre, ebm_table4_dimp.py on DiMP's)
TABLE4_REFERENCE = (("TrackingNet", "78.1 / 77.1 / 78.7"), ("LaSOT", "63.1 / 62.8 / 63.7"),
                    ("UAV123", "66.6 / 65.2 / 67.2"), ("NFS", "64.7 / 64.3 / 65.0"),
                    ("OTB-100", "70.1 / 69.3 / 70.7"))

# the loss comparisons of Table 4 (a - b), where both are in box_head_methods
LOSS_PAIRS = (("nce+", "kld-is"), ("nce+", "nce"), ("nce", "kld-is"))


def box_head_arms(cfg, chosen: dict | None = None) -> list[Arm]:
    """The EBM regression paper's Table 4 here: Box-Siam with SiamFC's own scale search, and one box
    head per loss of `box_head_methods` on that Box-Siam's backbone, compared with the
    scale search and with each other (`LOSS_PAIRS`). `chosen`: the settings of each
    method chosen on the validation split (`choose_box_head_settings`); without it,
    `cfg.box_head`'s."""
    chosen = chosen or {}
    arms = [Arm("box-siam", "box-siam", box_siam_arm)]
    for m in cfg.box_head_methods:
        settings = chosen.get(m) or dataclasses.replace(cfg.box_head, method=m)
        versus = ("box-siam",) + tuple(f"box-head-{b}" for a, b in LOSS_PAIRS
                                       if a == m and b in cfg.box_head_methods)
        arms.append(Arm(f"box-head-{m}", f"box-head-{m}",
                        functools.partial(train_box_head_arm, settings=settings),
                        tracker=box_head_tracker(settings), uses=("box-siam",),
                        compared_with=versus, about=(("loss", m),)))
    return arms


def best_candidate(scores: dict[str, list[float]]) -> str:
    """The candidate of highest mean score over seeds (`scores`: candidate -> one score
    per seed); a tie goes to the first in `scores`' order."""
    if not scores:
        raise ValueError("no candidates to choose from")
    means = {k: sum(v) / len(v) for k, v in scores.items()}
    return max(means, key=lambda k: (means[k], -list(means).index(k)))


def candidate_label(sigmas, centre: float, size: float, steps: int | None = None) -> str:
    """A candidate's name; `steps`, the training length, where lengths are chosen too."""
    return (f"sigmas {'/'.join(f'{x:g}' for x in sigmas)}, centre steps x{centre:g}, "
            f"size steps x{size:g}" + ("" if steps is None else f", {steps} steps"))


PROBE_KEYS = ("iou_start", "iou_refined", "outranks", "chance_outranks", "rank_correlation")


def _probe_row(probe: dict, candidate: int | None = None) -> dict:
    """One seed's probe figures: the head's, with "iou_refined" that of `candidate`
    (an index into the probe's candidates), and the control's refined IoU."""
    row = {k: probe["head"][k] for k in PROBE_KEYS}
    row["gain_se_pairs"] = probe["head_se"]["gain"]
    if candidate is not None:
        row["iou_refined"] = probe["candidates"][candidate]
        row["gain_se_pairs"] = probe["candidates_gain_se"][candidate]
    row["control_iou_refined"] = probe["control"]["iou_refined"]
    row["pairs"] = probe["pairs"]
    return row


def choose_box_head_settings(env: stages.TrackingRun, seeds) -> tuple[dict, dict]:
    """Per method of `box_head_methods`, the training sigmas (`sigma_grid`), the
    training length (early stopping: `box_head_lengths` and box_head.steps, each head
    trained once through them) and the refinement's centre and size step lengths
    (chosen separately: `step_scales` x box_head.step_lengths for (cx, cy) and for
    (log w, log h)) of highest mean IoU after
    refinement over `seeds` on the validation split (the last `validation_sequences` of
    the training split; no arm trains on them), by the refinement probe
    (`box_head_stages.probe_box_head`: held-out targets' true boxes perturbed, refined),
    never on the test split. Then the chosen heads are probed on the test split too (a
    measurement, after the choice). Returns ({method: settings}, the validation record
    for results.json, with the probes of both splits under "refinement")."""
    cfg, ctx = env.cfg, env.ctx
    val, val_id = stages.validation_split(env.data, cfg)
    sigma_grid = cfg.sigma_grid or (cfg.box_head.sigmas,)
    base = cfg.box_head.step_lengths * (4 // len(cfg.box_head.step_lengths))
    grid = [(c, z) for c in cfg.step_scales for z in cfg.step_scales]
    train_lengths = sorted(cfg.box_head_lengths) + [cfg.box_head.steps]
    named = bool(cfg.box_head_lengths)  # labels name the length where it is chosen
    lengths = [(c * base[0], c * base[1], z * base[2], z * base[3]) for c, z in grid]
    scores = {m: {} for m in cfg.box_head_methods}
    candidates, probes, heads = {m: {} for m in cfg.box_head_methods}, {}, {}
    for seed in seeds:
        used = {"box-siam": box_siam_arm(env, seed, {})}
        for m in cfg.box_head_methods:
            for sigmas in sigma_grid:
                prefix = None
                for steps in train_lengths:
                    trained = dataclasses.replace(cfg.box_head, method=m, sigmas=sigmas,
                                                  steps=steps)
                    t = train_box_head_arm(env, seed, used, settings=trained,
                                           prefix_steps=prefix)
                    prefix = steps
                    heads[(m, seed, sigmas, steps)] = t
                    ctx.log(f"probing {m} s{seed} sigmas {sigmas} after {steps} steps on "
                            f"validation ({len(grid)} step-length candidates)")
                    probe = probe_box_head(t.model, val, trained, stages.SIAMFC,
                                           seed=ctx.seed_of("probe-validation", "pairs"),
                                           candidates=lengths)
                    for i, (c, z) in enumerate(grid):
                        label = candidate_label(sigmas, c, z, steps if named else None)
                        scores[m].setdefault(label, []).append(probe["candidates"][i])
                        candidates[m][label] = (dataclasses.replace(
                            trained, step_lengths=lengths[i]), i, sigmas)
                        probes[(m, seed, label)] = probe
    choice = {m: best_candidate(scores[m]) for m in cfg.box_head_methods}
    refinement = {"validation": {}, "test": {}}
    test = env.data.eval_sets["generated-test"]
    for m, label in choice.items():
        settings, index, sigmas = candidates[m][label]
        ctx.log(f"validation: {m} takes {label} (mean IoU after refinement "
                f"{100 * sum(scores[m][label]) / len(scores[m][label]):.1f}%)")
        refinement["validation"][m] = [_probe_row(probes[(m, seed, label)], index)
                                       for seed in seeds]
        refinement["test"][m] = [_probe_row(probe_box_head(
            heads[(m, seed, sigmas, settings.steps)].model, test, settings, stages.SIAMFC,
            seed=ctx.seed_of("probe-test", "pairs"))) for seed in seeds]
    record = {"sequences": [q.name for q in val], "seeds": list(seeds),
              "measure": "mean IoU after refinement (the refinement probe)",
              "score": scores, "refinement": refinement, "choice": {m: {
                  "candidate": label, "step_lengths": list(candidates[m][label][0].step_lengths),
                  "sigmas": list(candidates[m][label][0].sigmas),
                  "steps": candidates[m][label][0].steps}
                  for m, label in choice.items()}}
    chosen = {m: candidates[m][label][0] for m, label in choice.items()}
    if cfg.tracker_choices:
        chosen, record["tracker"] = choose_tracker_options(
            env, seeds, chosen, {(m, seed): heads[(m, seed, chosen[m].sigmas,
                                                      chosen[m].steps)]
                                 for m in chosen for seed in seeds})
    return chosen, record


def choose_tracker_options(env: stages.TrackingRun, seeds, chosen: dict, heads: dict
                           ) -> tuple[dict, dict]:
    """Per method, the tracker option (`tracker_choices`, entries of `TRACKER_CHOICES`)
    of highest mean tracking AUC over `seeds` on the validation split, with the chosen
    step lengths and sigmas (`chosen`: {method: settings}; `heads`: {(method, seed):
    Trained}); the coarse tracker (SiamFC's centre, the previous size) is tracked there
    too, so that the record says whether refining is worth it on validation at all.
    Returns ({method: settings}, the record: AUC per option and seed, the choice, and
    "beats_coarse" per method)."""
    cfg, ctx = env.cfg, env.ctx
    val, val_id = stages.validation_split(env.data, cfg)
    auc = {m: {} for m in chosen}
    coarse = []
    for seed in seeds:
        for m, settings in chosen.items():
            t = heads[(m, seed)]
            if m == next(iter(chosen)) or cfg.box_head_joint:
                model = (t.identity["trained"] if cfg.box_head_joint
                         else t.identity["trained"]["backbone"])
                ident = {"model": model, "set": val_id, "refine": False,
                         "tracking": stages.SIAMFC.identity()}
                recs = stages.evaluate(
                    ctx, f"coarse-s{seed}", ident, "validation", val,
                    box_head_runner(t.model, settings, refine=False),
                    progress_desc=f"coarse s{seed} on validation")
                if m == next(iter(chosen)):
                    coarse.append(stages.scores(recs, val)["auc"])
            for label in cfg.tracker_choices:
                option = dataclasses.replace(settings, **TRACKER_CHOICES[label])
                ident = {**t.identity, "set": val_id, "tracking": option.identity()}
                recs = stages.evaluate(ctx, f"box-head-s{seed}", ident, "validation", val,
                                       box_head_runner(t.model, option),
                                       progress_desc=f"{m} ({label}) s{seed} on "
                                                     "validation")
                auc[m].setdefault(label, []).append(stages.scores(recs, val)["auc"])
    choice = {m: best_candidate(auc[m]) for m in chosen}
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    for m, label in choice.items():
        ctx.log(f"validation: {m} tracks with {label} (AUC {100 * mean(auc[m][label]):.1f}"
                f"; coarse {100 * mean(coarse):.1f})")
    record = {"measure": "tracking AUC on the validation split", "auc": auc,
              "coarse_auc": coarse, "choice": choice,
              "beats_coarse": {m: mean(auc[m][label]) > mean(coarse)
                               for m, label in choice.items()}}
    return ({m: dataclasses.replace(chosen[m], **TRACKER_CHOICES[label])
             for m, label in choice.items()}, record)


def coarse_evaluation(env: stages.TrackingRun, arms, res, eval_sets) -> None:
    """The box-head arms' coarse tracker (the same model with refine=False: SiamFC's
    centre at one scale, the previous size kept), tracked on every set and seed for
    its FPS beside the refined one's (`coarse_fps` in each box-head row). With a frozen
    backbone it is the same tracker for every loss (one cached evaluation per seed and
    set), added to the results as the arm "coarse" (compared with nothing)."""
    cfg, ctx = env.cfg, env.ctx
    heads = [a for a in arms if a.tracker.name == "box-head"]
    for set_name, (set_id, sequences) in eval_sets.items():
        coarse = []
        for seed in cfg.seeds:
            for arm in heads:
                t = res.trained[seed][arm.label]
                model = (t.identity["trained"] if cfg.box_head_joint
                         else t.identity["trained"]["backbone"])
                ident = {"model": model, "set": set_id, "refine": False,
                         "tracking": stages.SIAMFC.identity()}
                recs = stages.evaluate(ctx, f"coarse-s{seed}", ident, set_name, sequences,
                                       box_head_runner(t.model, arm.tracker.settings,
                                                       refine=False),
                                       progress_desc=f"coarse s{seed} on {set_name}")
                row = {"seed": seed, **stages.scores(recs, sequences)}
                rows = res.rows[set_name][arm.label]
                next(r for r in rows if r["seed"] == seed)["coarse_fps"] = row["fps"]
                if not cfg.box_head_joint and arm is heads[0]:
                    coarse.append(row)
                    res.records[set_name].setdefault("coarse", {})[seed] = recs
        if coarse:
            res.rows[set_name] = {"box-siam": res.rows[set_name]["box-siam"],
                                  "coarse": coarse,
                                  **{k: v for k, v in res.rows[set_name].items()
                                     if k != "box-siam"}}


def choose_box_head_arms(env: stages.TrackingRun, seeds) -> tuple[list[Arm], dict]:
    """The box-head arms with the settings chosen on the validation split
    (`choose_box_head_settings`), and the validation record."""
    chosen, record = choose_box_head_settings(env, seeds)
    return box_head_arms(env.cfg, chosen), record
