#!/usr/bin/env bash
# The prepared GPU session of issue 55 (one lent card, <= 15 minutes of device time, machine start included):
#   1. the decode entries prepared on CPU: the Pallas decode with and without the fused LM head + draw (1.5B, 16 x 8);
#   2. bench_rl at 1.5B: 16 prompts x n = 32 (512 rows), 256 new tokens, 3 PPO iterations in 16 micro-batches
#      (32 rows each, the measured train step's), half the completions judged as the reference solution, with
#      the PyTorch peer (transformers generate + the torch_baselines train step) first;
#   3. bench_rl at 7B if time is left: bf16 parameters and Adam moments, 16 x 8 rows, no peer.
# Each part runs under its own time limit and the next runs whatever the last did; outputs under OUT.
#
#     bash experiments/gpu_session.sh runs/gpu_session            # on the GPU machine, from the repository root
#     bash experiments/gpu_session.sh runs/gpu_smoke --smoke       # the same commands at the --smoke sizes (CPU)
# PY names the interpreter (default python; e.g. PY=.venv/bin/python).
set -uo pipefail
OUT=${1:-runs/gpu_session}
SMOKE=${2:-}
PY=${PY:-python}
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # the torch peer runs in the same process, before JAX
mkdir -p "$OUT"
: > "$OUT/status.txt"
(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv || echo "no nvidia-smi") \
    > "$OUT/nvidia-smi.csv" 2>&1

run() {   # run NAME LIMIT_S COMMAND...: the command's output in OUT/NAME.log, its exit status in OUT/status.txt
    local name=$1 limit=$2
    shift 2
    local t0=$SECONDS
    echo "== $name (limit ${limit} s): $*"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "$name: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/status.txt"
    tail -n 25 "$OUT/$name.log"
}

if [ "$SMOKE" = "--smoke" ]; then
    run decode_options 300 "$PY" -m experiments.bench_decode_options --smoke --entries=default/xla \
        --results_dir="$OUT/decode_options"
    run bench_rl_1.5b 300 "$PY" -m experiments.bench_rl --smoke --reference_share=0.5 --results_dir="$OUT/bench_rl_1.5b"
    exit 0
fi
run decode_options 150 "$PY" -m experiments.bench_decode_options --entries=default/pallas,default/pallas+draw \
    --results_dir="$OUT/decode_options"
run bench_rl_1.5b 360 "$PY" -m experiments.bench_rl --preset=qwen2.5-coder-1.5b --prompts=16 --n=32 \
    --micro_batches=16 --reference_share=0.5 --steps=2 --peer=torch --results_dir="$OUT/bench_rl_1.5b"
run bench_rl_7b 240 "$PY" -m experiments.bench_rl --preset=qwen2.5-coder-7b --dtype=bfloat16 --prompts=16 --n=8 \
    --micro_batches=8 --reference_share=0.5 --steps=2 --peer=none --results_dir="$OUT/bench_rl_7b"
