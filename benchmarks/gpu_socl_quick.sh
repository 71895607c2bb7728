#!/usr/bin/env bash
# SoCL's quick stages on one GPU, one seed, with their timings: Table 1's ablation from
# the MoCo start with the settings chosen on validation (backbone lr x0.1, TOP
# temperature 1, eq. 10 as printed) on the grouped data (160 videos in scene groups of 4
# whose targets move together), first at the 159 px context region, then at two
# receptive fields of ResNet-18 (455 px, `--config.region_fields=2`; the data and the
# MoCo start are shared through the work directory). Each run stops at its time limit;
# each line of its log carries the seconds since the run started, and the stage lines
# hold the training times ("stage ...: N steps, S s of training").
#
#     bash benchmarks/gpu_socl_quick.sh OUT_DIR [SECONDS_159] [SECONDS_455]
#
# A limit of 0 skips that region. OUT_DIR receives, per region, the run's log and (when
# it finished) its results.json and results.md. Run it from the repository root with
# the package importable.
set -u
out=${1:?usage: gpu_socl_quick.sh OUT_DIR [SECONDS_159] [SECONDS_455]}
limit_159=${2:-300}
limit_455=${3:-200}
source benchmarks/gpu_lib.sh
gpu_begin "$out"
common=(--config.init=moco --config.backbone=resnet18 --config.seeds=0
        --config.backbone_lr_scale=0.1 --config.num_train_sequences=160
        --config.annotate_every=8 --config.diagnostic_pairs=256
        --config.scene_group=4 --config.scene_path=true --no-progress)

for run in "159 $limit_159 0" "455 $limit_455 2"; do
    set -- $run
    [ "$2" -gt 0 ] || continue
    stamped "$out/table1_$1.log" "$2" "$python" -m ebm_jax.cli run \
        experiments/tracking/socl_table1_ablation.py:quick --workdir "$work/runs" \
        --out "$work/out_$1" "${common[@]}" --config.region_fields="$3"
    for f in results.json results.md; do
        [ -f "$work/out_$1/$f" ] && cp "$work/out_$1/$f" "$out/table1_$1_$f"
    done
done
exit 0
