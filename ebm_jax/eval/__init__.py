"""Metrics in one home: density KL (1D regression), COCO AP (detection), linear probe
and kNN (contrastive). Import the submodule you need, e.g. `ebm_jax.eval.density`."""
