#!/usr/bin/env bash
# Does SoCL's result from the MoCo start depend on the GPU's float32 matmul precision?
# The same run twice, one seed, at `--config.matmul_precision=default` (the backend's
# fast passes: TF32 on NVIDIA GPUs) and at `highest` (full float32): the MoCo
# pretraining and its probe, then SoCL's +mix-up and +LST arms on the validation split
# (`socl_lst_validation:moco_lst`). The data and the TOP proposals are shared through
# one work directory; every stage of the `highest` run is its own.
#
#     bash benchmarks/gpu_precision.sh OUT_DIR [SECONDS_EACH]
#
# OUT_DIR receives each run's log (every line with the seconds since it started) and,
# for a run that finished, its results.json and results.md; `ebm-jax compare` of the
# two results.json files (arms paired by seed and sequence) gives the AUC difference,
# the results' MoCo probe the features' difference. Run it from the repository root
# with the package importable.
set -u
out=${1:?usage: gpu_precision.sh OUT_DIR [SECONDS_EACH]}
limit=${2:-270}
source benchmarks/gpu_lib.sh
gpu_begin "$out"

for precision in default highest; do
    stamped "$out/moco_lst_$precision.log" "$limit" "$python" -m ebm_jax.cli run \
        experiments/tracking/socl_lst_validation.py:moco_lst --workdir "$work/runs" \
        --out "$work/$precision" --no-progress --config.seeds=0 \
        --config.matmul_precision="$precision"
    for f in results.json results.md; do
        [ -f "$work/$precision/$f" ] && cp "$work/$precision/$f" "$out/moco_lst_${precision}_$f"
    done
done
exit 0
