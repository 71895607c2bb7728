"""A small training job for the kill-and-resume test (run as a subprocess).

    python tests/_resume_job.py RUN_DIR OUT.npz [--die-at STEP] [--devices N]

Trains the 1D network with NCE for 60 steps (checkpoint every 10, two steps per call)
and saves the final parameters to OUT.npz. With --die-at the process SIGKILLs itself
right after that step, in the middle of the run.
"""

import argparse
import os
import signal

import jax
import numpy as np
import optax
from flax import nnx

from ebm_jax.energy import batch_loss, make_loss
from ebm_jax.models import ToyEnergyMLP
from ebm_jax.train import create_train_state, fit, make_mesh, make_train_step

p = argparse.ArgumentParser()
p.add_argument("run_dir")
p.add_argument("out")
p.add_argument("--die-at", type=int, default=None)
p.add_argument("--devices", type=int, default=2)
args = p.parse_args()

loss = make_loss("nce", sigmas=(0.1, 0.8), num_samples=8)


def loss_fn(model, batch, key):
    x, y = batch
    return batch_loss(loss, lambda xx, yy: model(xx[None], yy[None])[0], x, y, key)


rng = np.random.default_rng(0)
X = rng.uniform(-3, 3, (256, 1)).astype(np.float32)
Y = np.sin(X).astype(np.float32)


def batches(s):  # steps s and s + 1, a pure function of s
    idx = np.stack([np.arange(16) + 16 * ((s + i) % 16) for i in range(2)])
    return X[idx], Y[idx]


def on_metrics(step, metrics):
    if args.die_at is not None and step >= args.die_at:
        os.kill(os.getpid(), signal.SIGKILL)


optimizer = optax.adam(1e-2)
graphdef, state = create_train_state(ToyEnergyMLP(rngs=nnx.Rngs(0)), optimizer,
                                     jax.random.key(7))
mesh = make_mesh(args.devices)
step = make_train_step(graphdef, loss_fn, optimizer, mesh, steps_per_call=2)
state = fit(args.run_dir, state, step, batches, num_steps=60, save_every=10, log_every=2,
            config={"job": "resume-test"}, progress=False, on_metrics=on_metrics)
leaves = jax.tree.leaves(state.params)
np.savez(args.out, *[np.asarray(a) for a in leaves])
