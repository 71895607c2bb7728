"""A minimal recipe for the runner's tests: linear regression on generated data,
one TrainStage, a cached evaluation, a table and a figure. `die_at` raises
KeyboardInterrupt from the batch function at that step (not part of the identity)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ebm_jax.config import ADDED_FIELD, MATMUL_PRECISIONS, Checks
from ebm_jax.report import Report, markdown_table
from ebm_jax.train import create_train_state, make_train_step
from ebm_jax.train.stages import TrainStage

CALLS = {"compute": 0}
SEEN = {}  # what the last run saw: its matmul precision, its stage's directory


@dataclasses.dataclass(frozen=True)
class Config:
    num_steps: int = 20
    learning_rate: float = 0.1
    die_at: int | None = None
    widths: tuple[int, ...] = (3,)
    seed: int = 0
    matmul_precision: str = dataclasses.field(default="highest", metadata=ADDED_FIELD)

    def __post_init__(self):
        c = Checks(self)
        c.one_of("matmul_precision", MATMUL_PRECISIONS)
        c.int_range("num_steps", 1)
        c.positive("learning_rate")
        c.seed()


def check(cfg: Config, ctx) -> None:
    if 8 % ctx.num_devices:
        raise ValueError(f"--devices must divide the batch of 8, got {ctx.num_devices}")


def run(cfg: Config, ctx) -> Report:
    stage = TrainStage("toy", {"steps": cfg.num_steps, "lr": cfg.learning_rate,
                               "seed": cfg.seed}, num_steps=cfg.num_steps, log_every=5,
                       save_every=10)
    model = nnx.Linear(3, 1, rngs=nnx.Rngs(params=stage.key(ctx, "init")))
    opt = optax.sgd(cfg.learning_rate)
    graphdef, state = create_train_state(model, opt, stage.key(ctx, "train"))

    def loss_fn(m, batch, key):
        x, y = batch
        return jnp.mean((m(x)[:, 0] - y) ** 2), {}

    step = make_train_step(graphdef, loss_fn, opt, ctx.mesh)
    w_true = np.array([1.0, -2.0, 0.5], np.float32)

    def batches(s):
        if cfg.die_at is not None and s == cfg.die_at:
            raise KeyboardInterrupt
        rng = np.random.default_rng([ctx.seed_of(stage.name, "batches"), s])
        x = rng.normal(size=(8, 3)).astype(np.float32)
        return x, x @ w_true

    state, figures = stage.run(ctx, state, step, batches)
    params = jax.device_get(state.params)
    SEEN["precision"] = jax.config.jax_default_matmul_precision  # as the run traced
    SEEN["stage_dir"] = stage.dir(ctx).name

    def evaluate():
        CALLS["compute"] += 1
        w = np.asarray(params["kernel"].get_value())[:, 0]
        return {"error": float(np.abs(w - w_true).max())}

    result = ctx.cached(stage.dir(ctx), "eval", stage.full_identity, evaluate)
    table = {"toy": [{"final_loss": figures.final_loss, **result}]}

    def figure():
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots()
        ax.plot([0, 1], [0, result["error"]])
        return fig

    md = markdown_table(["final loss", "error"],
                        [[f"{figures.final_loss:.4f}", f"{result['error']:.4f}"]])
    return Report({"tables": table}, md, {"toy.png": figure})
