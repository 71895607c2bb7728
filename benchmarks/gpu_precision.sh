#!/usr/bin/env bash
# Does SoCL's result from the MoCo start depend on the GPU's float32 matmul precision?
# The same run twice, one seed, at `--config.matmul_precision=default` (the backend's
# fast passes: TF32 on NVIDIA GPUs) and at `highest` (full float32): the MoCo
# pretraining and its probe, then SoCL's +mix-up and +LST arms on the validation split
# (`socl_lst_validation:moco_lst`). The two runs go side by side, each in its own work
# directory (their timings are not the point; each shares the GPU with the other),
# each started from a copy of SEED_WORKDIR where one is given: a work directory of the
# same config whose cached stages (the TOP maps, computed on a CPU: EdgeBoxes needs
# OpenCV's contrib modules) the runs reuse; everything else each run makes itself.
#
#     bash benchmarks/gpu_precision.sh OUT_DIR [SECONDS] [SEED_WORKDIR]
#
# OUT_DIR receives each run's log (every line with the seconds since it started) and,
# for a run that finished, its results.json and results.md; `ebm-jax compare` of the
# two results.json files (arms paired by seed and sequence) gives the AUC difference,
# the results' MoCo probe the features' difference. Each run takes at most
# XLA_PYTHON_CLIENT_MEM_FRACTION of the GPU's memory (default here 0.25).
# PRECISION_WORKDIR (default: a scratch folder) holds the two work directories: one
# kept between calls resumes the runs where the limit stopped them. Run it from the
# repository root with the package importable.
set -u
out=${1:?usage: gpu_precision.sh OUT_DIR [SECONDS] [SEED_WORKDIR]}
limit=${2:-480}
seed=${3:-}
source benchmarks/gpu_lib.sh
gpu_begin "$out"
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.25}

base=${PRECISION_WORKDIR:-$work}  # a folder that outlasts the script resumes the runs

for precision in default highest; do
    if [ ! -d "$base/runs_$precision" ]; then
        mkdir -p "$base/runs_$precision"
        [ -n "$seed" ] && cp -r "$seed"/. "$base/runs_$precision/"
    fi
    (
        stamped "$out/moco_lst_$precision.log" "$limit" "$python" -m ebm_jax.cli run \
            experiments/tracking/socl_lst_validation.py:moco_lst \
            --workdir "$base/runs_$precision" --out "$work/$precision" --no-progress \
            --config.seeds=0 --config.matmul_precision="$precision"
        for f in results.json results.md; do
            [ -f "$work/$precision/$f" ] && cp "$work/$precision/$f" "$out/moco_lst_${precision}_$f"
        done
    ) &
done
wait
exit 0
