"""Arms of a tracking comparison and the one runner that trains and tracks them, shared
by the tracking (Box-Siam) and SoCL recipes.

An arm is one trained (or untrained) tracker in a comparison, a value: its label, its
training function, its tracker and the labels of the arms it is compared with. An
experiment is a table of arms (`arms_of` in each recipe) plus the paper's figures; the
pairs of the table are `pairs_of(arms)`.

    train(env, seed, used) -> Trained      `env`: what the recipe opened once (config,
                                           run context, data, caches); `used`: the
                                           models of the same seed of the arms named in
                                           `uses` ({label: Trained}), trained first, so
                                           that an arm can build on another arm's model
    tracker.build(model, settings) -> run  `run(seq) -> (boxes, seconds)`

Evaluation stages are `<workdir>/eval-<method>-s<seed>-<hash>/<set>/`, keyed by the
model's identity (`Trained.identity`), the set and the tracker's settings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ebm_jax.recipes.tracking import stages as stages
from ebm_jax.recipes.tracking.stages import Trained

__all__ = ["Arm", "ArmResults", "Experiment", "Tracker", "Trained", "dcf_tracker", "pairs_of",
           "reuse_model", "run_arms", "siamfc_tracker", "training_order"]


@dataclasses.dataclass(frozen=True)
class Tracker:
    """A tracker as a value: `build(model, settings)` returns `run(seq) -> (boxes,
    seconds)`; `settings` (a dataclass) is part of each evaluation's identity."""

    name: str
    settings: Any
    build: Callable[[Any, Any], Callable]

    def identity(self) -> dict:
        own = getattr(self.settings, "identity", None)  # settings that omit defaults
        return own() if callable(own) else dataclasses.asdict(self.settings)


def siamfc_tracker() -> Tracker:
    """SiamFC's own scale search with its published settings (Bertinetto et al. 2016, SiamFC, and its public implementations)."""
    return Tracker("siamfc", stages.SIAMFC, stages.siamfc_runner)


def dcf_tracker(settings) -> Tracker:
    """The correlation filter tracker (`ebm_jax.tracking.dcf`) with `settings`."""
    return Tracker("dcf", settings, stages.dcf_runner)


def reuse_model(env, seed: int, used: Mapping[str, Trained], *, label: str) -> Trained:
    """An arm's training function that trains nothing: the same seed's model of arm
    `label` (which the arm `uses`), for another tracker on that arm's backbone."""
    return used[label]


@dataclasses.dataclass(frozen=True)
class Arm:
    """A row of an experiment's table. `method` names its evaluation stages
    (`eval-<method>-s<seed>`); `uses` the arms whose models (same seed) its training
    gets; `compared_with` the labels it is compared with (a - b); `x` its swept value,
    for plots; `about` (field, value) pairs that describe it in the results."""

    label: str
    method: str
    train: Callable[[Any, int, Mapping[str, Trained]], Trained]
    tracker: Tracker = dataclasses.field(default_factory=siamfc_tracker)
    uses: tuple[str, ...] = ()
    compared_with: tuple[str, ...] = ()
    x: float | None = None
    about: tuple = ()

    def describe(self) -> dict:
        """The arm as the results list it (JSON-able)."""
        return {"label": self.label, "method": self.method, **dict(self.about), "x": self.x}


def pairs_of(arms: Sequence[Arm]) -> list[tuple[str, str]]:
    """The (a, b) comparisons of a table, a - b, in its order; every b must be a label
    of the table or "static" (the tracker that never moves)."""
    labels = {a.label for a in arms} | {"static"}
    for a in arms:
        for b in a.compared_with:
            if b not in labels:
                raise ValueError(f"arm {a.label!r} is compared with {b!r}, which is not "
                                 f"an arm of the table ({sorted(labels)})")
    return [(a.label, b) for a in arms for b in a.compared_with]


def training_order(arms: Sequence[Arm]) -> list[Arm]:
    """The arms with each after the arms it `uses` (otherwise in the table's order); a
    ValueError names an unknown or circular use."""
    by_label = {a.label: a for a in arms}
    order, state = [], {}

    def visit(arm: Arm, path: tuple[str, ...]):
        if state.get(arm.label) == "done":
            return
        if arm.label in path:
            raise ValueError(f"arms use each other in a circle: {' -> '.join(path)}")
        for label in arm.uses:
            if label not in by_label:
                raise ValueError(f"arm {arm.label!r} uses {label!r}, which is not an arm "
                                 f"of the table ({sorted(by_label)})")
            visit(by_label[label], path + (arm.label,))
        state[arm.label] = "done"
        order.append(arm)

    for arm in arms:
        visit(arm, ())
    return order


@dataclasses.dataclass
class Experiment:
    """A row of a recipe's table of experiments: the arms (with their pairs) from the
    config, and the paper's figures they are compared with. An experiment whose
    trackers' settings are chosen on a validation split gives `choose(env, seeds) ->
    (arms, record)`, run before any test-split tracking (the arms then carry the chosen
    settings; the record goes to the results); `after(env, arms, results, eval_sets)`
    adds evaluations of its own to the `ArmResults` once every arm is tracked.
    `stages_per_seed(cfg)`: its training stages per seed (the progress's "stage i of
    n"); `check(cfg)`: its own checks of the config, raised before any training;
    `track_validation`: its arms are tracked on the validation split too (a diagnostic:
    nothing is chosen there by it)."""

    arms: Callable[[Any], list[Arm]]
    paper: str = ""
    choose: Callable[[Any, Sequence[int]], tuple[list[Arm], dict]] | None = None
    after: Callable[[Any, Sequence[Arm], Any, Mapping], None] | None = None
    stages_per_seed: Callable[[Any], int] | None = None
    check: Callable[[Any], None] | None = None
    track_validation: bool = False


@dataclasses.dataclass
class ArmResults:
    """rows[set][label]: one scores row per seed ({"seed", **scores}); records[set]
    [label][seed]: the tracked boxes and times; trained[seed][label]: the models;
    static[set]: the scores of the tracker that never moves."""

    rows: dict
    records: dict
    trained: dict
    static: dict


def run_arms(env, ctx, arms: Sequence[Arm], seeds: Sequence[int],
             eval_sets: Mapping[str, tuple[Any, list]], *,
             tracker_crop: str = "continuous") -> ArmResults:
    """Trains every arm for every seed (each after the arms it uses), tracks each of
    `eval_sets` ({name: (identity, sequences)}) with each arm's tracker, and with the
    tracker that never moves once per set; every stage resumes. Rows are in the table's
    order. SiamFC's trackers crop with `tracker_crop` ("continuous" or "rounded")."""
    if tracker_crop != "continuous":
        arms = [dataclasses.replace(a, tracker=dataclasses.replace(
            a.tracker, settings=dataclasses.replace(a.tracker.settings, crop=tracker_crop)))
            if a.tracker.name == "siamfc" else a for a in arms]
    static = {}
    for set_name, (set_id, sequences) in eval_sets.items():
        recs = stages.evaluate(ctx, "static", {"set": set_id}, set_name, sequences,
                               stages.static_boxes, progress_desc=f"static on {set_name}")
        static[set_name] = stages.scores(recs, sequences)
    rows = {s: {a.label: [] for a in arms} for s in eval_sets}
    records = {s: {a.label: {} for a in arms} for s in eval_sets}
    trained: dict[int, dict[str, Trained]] = {}
    for seed in seeds:
        done = trained[seed] = {}
        for arm in training_order(arms):
            done[arm.label] = t = arm.train(env, seed, {u: done[u] for u in arm.uses})
            run = arm.tracker.build(t.model, arm.tracker.settings)
            for set_name, (set_id, sequences) in eval_sets.items():
                ident = {**t.identity, "set": set_id, "tracking": arm.tracker.identity()}
                recs = stages.evaluate(ctx, f"{arm.method}-s{seed}", ident, set_name,
                                       sequences, run,
                                       progress_desc=f"{arm.label} s{seed} on {set_name}")
                row = {"seed": seed, **stages.scores(recs, sequences)}
                rows[set_name][arm.label].append(row)
                records[set_name][arm.label][seed] = recs
                ctx.log(f"{arm.label} (seed {seed}) on {set_name}: AUC "
                        f"{100 * row['auc']:.1f}, precision {100 * row['precision']:.1f}, "
                        f"AO {100 * row['ao']:.1f} (%), {row['fps'] or 0:.1f} FPS")
    return ArmResults(rows=rows, records=records, trained=trained, static=static)
