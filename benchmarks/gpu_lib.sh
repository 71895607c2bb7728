# Shared by the GPU scripts of benchmarks/ (gpu_table1.sh, gpu_precision.sh,
# gpu_socl_quick.sh). Source it from the repository root, then:
#
#     gpu_begin OUT_DIR          # OUT_DIR made; $work a scratch folder removed at exit;
#                                # the JAX and Flax versions, the devices and the GPU
#     stamped LOG LIMIT CMD...   # CMD's output in LOG, every line with the seconds since
#                                # it started, stopped at LIMIT s; its exit status and
#                                # time last; the log's end printed
#
# $python is the interpreter (PYTHON, default python3).
python=${PYTHON:-python3}

gpu_begin() {
    mkdir -p "$1"
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
    "$python" -c "import jax, flax; print('jax', jax.__version__, 'flax', flax.__version__, jax.devices())"
    nvidia-smi -L 2>/dev/null || true
    echo "CPU cores: $(nproc)"
}

stamped() {
    local log=$1 limit=$2 start
    shift 2
    start=$(date +%s)
    PYTHONUNBUFFERED=1 timeout "$limit" "$@" 2>&1 |
        while IFS= read -r line; do
            printf '%5d s  %s\n' "$(( $(date +%s) - start ))" "$line"
        done > "$log"
    echo "rc ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s (limit $limit s)" >> "$log"
    tail -n 4 "$log"
}
