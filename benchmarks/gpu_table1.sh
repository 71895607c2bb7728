#!/usr/bin/env bash
# The EBM regression paper's Table 1 whole on one GPU (`table1_toy1d:paper`: all nine
# methods, 20 models x 75 epochs, both datasets), ML-MCMC's chains through the fused
# Pallas kernel (`--config.langevin=auto` takes it on a GPU where it compiles; the run's
# log says which), after the fused and the reference chains side by side
# (`benchmarks/langevin_chain.py`), and then, while time is left, ML-MCMC-256 again with
# the reference chain for the same stages' seconds.
#
#     bash benchmarks/gpu_table1.sh OUT_DIR [SECONDS_TABLE] [SECONDS_REFERENCE]
#
# Each run stops at its limit (0 skips it); every line of a log carries the seconds
# since that run started, and each stage's line its compile, train and eval seconds.
# TABLE1_WORKDIR (default: a scratch folder) is the runs' work directory: one kept
# between calls resumes the table where a limit stopped it. OUT_DIR receives the logs, langevin_chain.{json,md} and, for a run that finished,
# its results.json and results.md. Run it from the repository root with the package
# importable.
set -u
out=${1:?usage: gpu_table1.sh OUT_DIR [SECONDS_TABLE] [SECONDS_REFERENCE]}
limit_table=${2:-420}
limit_reference=${3:-0}
source benchmarks/gpu_lib.sh
gpu_begin "$out"

# one model's chains of one training step at the paper's sizes (batch 32, M = 1024, L = 256)
runs=${TABLE1_WORKDIR:-$work/runs}  # a folder that outlasts the script resumes the table

timeout 90 "$python" benchmarks/langevin_chain.py --steps 256 --examples 32 --samples 1024 \
    --out "$out" 2>&1 | tail -n 12

if [ "$limit_table" -gt 0 ]; then
    stamped "$out/table1_paper.log" "$limit_table" "$python" -m ebm_jax.cli run \
        experiments/ebm_regression/table1_toy1d.py:paper --workdir "$runs" \
        --out "$work/table1" --no-progress
    for f in results.json results.md; do
        [ -f "$work/table1/$f" ] && cp "$work/table1/$f" "$out/table1_paper_$f"
    done
fi
if [ "$limit_reference" -gt 0 ]; then
    stamped "$out/ml_mcmc_256_reference.log" "$limit_reference" "$python" -m ebm_jax.cli \
        run experiments/ebm_regression/table1_toy1d.py:paper --workdir "$runs" \
        --out "$work/reference" --no-progress --config.methods=ml-mcmc-256 \
        --config.langevin=reference
fi
exit 0
