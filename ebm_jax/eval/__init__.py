"""Metrics in one home: density KL (1D regression), COCO AP (detection), linear probe
and kNN (contrastive), a tracking backbone's localisation diagnostics
(`backbone_diagnostics`). Import the submodule you need, e.g. `ebm_jax.eval.density`."""
