#!/usr/bin/env bash
# Everything in drope that needs an NVIDIA GPU, in one call (docs/gpu.md). Stages, in order, each
# under its own time budget (seconds; DROPE_GPU_CHECK_BUDGET_<STAGE> overrides one); a failing stage is
# recorded and the next one runs:
#   setup                  scripts/setup.sh into a separate build dir ($DROPE_BUILD_DIR, default build-gpu) for
#                          CUDA archs $DROPE_CUDA_ARCHS (default "80;90"), only the targets below; then checks
#                          that the binaries hold sm_80 and sm_90 code (cuobjdump). DROPE_GPU_CHECK_PREBUILT=1:
#                          no build, only checks binaries built elsewhere (scripts/gpu-bundle.sh)
#   gpu                    nvidia-smi
#   gpu_tests              ctest -L gpu (every attention backend and our kernels vs the float64 reference)
#   attention_bench_d64    drope-bench attention --device cuda, bf16, T = 1K..16K, D = 64: ours (the plan's
#   attention_bench_d128   default), flash, mem_efficient, cudnn, cudnn_graph, own_cuda, SDPA, SDPA + dense
#                          mask, reference
#   train_step_qwen2_0_5b  drope-train: qwen2-0.5b (random weights), bf16, seq 1024, a few steps on docs/ as
#                          bytes: tokens/s and MFU (train.peak_tflops from the GPU's name or DROPE_PEAK_TFLOPS)
#   train_step_qwen2_0_5b_eager  the same step in eager PyTorch (HF Qwen2ForCausalLM, SDPA, fused AdamW):
#                          tokens/s of what users run instead, for the ratio in the summary
#   train_step_qwen2_0_5b_compiled  the eager stage's model with torch.compile per decoder layer (regional
#                          compilation): what users run when they compile, for the second ratio
#   train_step_qwen2_0_5b_fused_loss_off  the train stage with train.fused_loss: false (the chunked loss in
#                          separate ops): the fused loss's effect on tokens/s
#   train_step_qwen2_0_5b_cuda_graphs  the train stage with train.cuda_graphs: true (and train.chunked_loss:
#                          false, which graphs need): forward+backward replayed from a CUDA graph
#   nccl_smoke             torchrun --no-python --nproc_per_node=1 drope-train (tiny, train.device cuda) with a
#                          single-rank NCCL process group (DROPE_DIST_SINGLE_RANK_GROUP=1)
#   two_ranks              two ranks on the one GPU (torchrun --nproc_per_node=2; Gloo over the CUDA tensors, as
#                          NCCL refuses two ranks on one device), train.shard none / optimizer / grads / params
#                          with and without activation checkpointing: losses equal one rank's (CPU tests' tolerance)
#   greedy_gpu_vs_cpu      drope-bench generate on a random tiny model, float32, on the CPU and on CUDA: the
#                          greedy tokens must be equal
#   real_smollm2_drope     the real SmolLM2-135M-Instruct (GGUF) recalibrated with DroPE + QK-norm in bf16 at
#                          C = 2048 on prose in its own tokenizer, temperature fitted, then NIAH at 4K..32K for the
#                          model as released, with YaRN, and DroPE (loss curve in real/run/log.jsonl)
# After every stage $OUT_DIR/summary.json and summary.md are rewritten (atomically) from what the stages left
# there (scripts/drope_scripts/gpu_check.py). Other arguments are options of drope-bench attention for both of its
# runs (--cases, --impls, --lengths, ...: the list is below, each value checked); anything else is refused before
# any stage runs, as is a bad knob (DROPE_CUDA_ARCHS, DROPE_GPU_REAL_STEPS, DROPE_GPU_CHECK_BUDGET_<STAGE>, ...).
# --dry-run prints every stage with its budget and command and writes a summary of "dry run" stages
# (tests/py/test_gpu_check.py runs it on the CPU). --rehearse runs every stage end to end on the CPU through the
# same stage functions, commands and configs with only the device and the sizes changed (device cpu, a few steps,
# short sequences, tiny models where a stage's model would not fit the CPU's time), on the CPU build (build/)
# without building; what needs CUDA (nvidia-smi, cuobjdump, the GPU tests' CUDA cases, NCCL) is reported as
# skipped by name ("skipped (CUDA-only: ...)", or "ok; CUDA-only parts skipped: ..."). Exit status: 0 when every
# stage is ok (or, rehearsing, skipped as CUDA-only).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/lib/knobs.sh"
WHO=scripts/gpu-check.sh
DRY_RUN=0
REHEARSE=0
# The arguments: --dry-run, --rehearse, and options of drope-bench attention, each checked here (a mistyped flag is
# refused, never passed on): those below, as "--opt VALUE" or "--opt=VALUE". The stage sets --device, --dtype,
# --head-dim, --json and --quiet itself; an option of the stage's own sizes (--heads, --lengths, ...) replaces it.
declare -A BENCH_GIVEN=()
BENCH_USER=()
bench_value() {  # OPTION VALUE: checks VALUE for OPTION
  local o="$1" v="$2" item
  case "$o" in
    --lengths) [[ "$v" =~ ^[1-9][0-9]{0,6}(,[1-9][0-9]{0,6})*$ ]] ||
      knob_fail "$WHO" "$o must be a comma list of positive integers, got '$v'" ;;
    --batch | --heads | --gqa-kv-heads | --window | --repeats) [[ "$v" =~ ^[1-9][0-9]{0,5}$ ]] ||
      knob_fail "$WHO" "$o must be a positive integer, got '$v'" ;;
    --warmup) [[ "$v" =~ ^[0-9]{1,6}$ ]] || knob_fail "$WHO" "$o must be an integer >= 0, got '$v'" ;;
    --max-seconds | --max-mem-gb) [[ "$v" =~ ^([0-9]{1,6}(\.[0-9]*)?|\.[0-9]+)$ && "$v" =~ [1-9] ]] ||
      knob_fail "$WHO" "$o must be a number > 0, got '$v'" ;;
    --cases | --impls)
      local allowed="causal alibi window gqa"
      [ "$o" = --impls ] && allowed="ours sdpa sdpa_mask reference flash mem_efficient cudnn cudnn_graph own_cuda"
      [ -n "$v" ] || knob_fail "$WHO" "$o must be a comma list of: ${allowed// /, }, got ''"
      IFS=, read -r -a items <<<"$v"
      for item in "${items[@]}"; do
        [[ " $allowed " == *" $item "* ]] || knob_fail "$WHO" "$o: '$item' is not one of ${allowed// /, }"
      done ;;
  esac
}
while [ $# -gt 0 ]; do
  arg="$1" opt="${1%%=*}"
  shift
  case "$opt" in
    --dry-run | --rehearse)
      [ "$arg" = "$opt" ] || knob_fail "$WHO" "$opt takes no value, got '$arg'"
      if [ "$opt" = --dry-run ]; then DRY_RUN=1; else REHEARSE=1; fi ;;
    --lengths | --batch | --heads | --gqa-kv-heads | --window | --repeats | --warmup | --max-seconds | --max-mem-gb | \
      --cases | --impls)
      if [ "$arg" = "$opt" ]; then
        [ $# -ge 1 ] || knob_fail "$WHO" "$opt needs a value"
        value="$1"
        shift
      else
        value="${arg#*=}"
      fi
      [ -z "${BENCH_GIVEN[$opt]+x}" ] || knob_fail "$WHO" "$opt is given twice"
      bench_value "$opt" "$value"
      BENCH_GIVEN[$opt]=1
      BENCH_USER+=("$opt" "$value") ;;
    --forward-only)
      [ "$arg" = "$opt" ] || knob_fail "$WHO" "$opt takes no value, got '$arg'"
      BENCH_USER+=("$opt") ;;
    --device | --dtype | --head-dim | --json | --quiet)
      knob_fail "$WHO" "$opt is set by the benchmark stages themselves (not an argument of $WHO)" ;;
    *) knob_fail "$WHO" "unknown argument '$arg' (expected --dry-run, --rehearse or options of drope-bench attention: \
--lengths, --batch, --heads, --gqa-kv-heads, --window, --repeats, --warmup, --max-seconds, --max-mem-gb, --cases, \
--impls, --forward-only)" ;;
  esac
done
# The environment, before any work (the dry run checks it too): a relative DROPE_BUILD_DIR is read from the
# repository root, as scripts/setup.sh reads it.
knob_switch "$WHO" DROPE_GPU_CHECK_PREBUILT
knob_int "$WHO" DROPE_GPU_REAL_STEPS 1 100000
knob_cuda_archs "$WHO" DROPE_CUDA_ARCHS "${DROPE_CUDA_ARCHS:-80;90}"
knob_out_dir "$WHO" DROPE_GPU_CHECK_OUT "$PWD"
if [ -n "${DROPE_PEAK_TFLOPS+x}" ] && ! [[ "$DROPE_PEAK_TFLOPS" =~ ^([0-9]{1,6}(\.[0-9]*)?|\.[0-9]+)$ &&
  "$DROPE_PEAK_TFLOPS" =~ [1-9] ]]; then
  knob_fail "$WHO" "DROPE_PEAK_TFLOPS must be a number > 0 (dense bf16 TFLOP/s of one GPU), got '$DROPE_PEAK_TFLOPS'"
fi
DROPE_CMAKE_ARGS="" DROPE_SETUP_TARGETS="" setup_knobs "$WHO" "$ROOT"  # the set-up stage's (it sets those two)
if [ -n "${DROPE_BUILD_DIR-}" ] && [[ "$DROPE_BUILD_DIR" != /* ]]; then DROPE_BUILD_DIR="$ROOT/$DROPE_BUILD_DIR"; fi
# Every stage, in the order they run (the run_stage calls at the end): DROPE_GPU_CHECK_BUDGET_<STAGE> must name one.
STAGE_NAMES=(setup gpu gpu_tests attention_bench_d64 attention_bench_d128 train_step_qwen2_0_5b
  train_step_qwen2_0_5b_eager train_step_qwen2_0_5b_compiled train_step_qwen2_0_5b_fused_loss_off
  train_step_qwen2_0_5b_cuda_graphs nccl_smoke two_ranks greedy_gpu_vs_cpu real_smollm2_drope)
for var in $(compgen -v DROPE_GPU_CHECK_BUDGET_); do
  stage="${var#DROPE_GPU_CHECK_BUDGET_}"
  [[ " ${STAGE_NAMES[*]^^} " == *" $stage "* ]] ||
    knob_fail "$WHO" "$var: no stage ${stage,,} (stages: ${STAGE_NAMES[*]})"
  [[ "${!var}" =~ ^[1-9][0-9]{0,4}$ ]] ||
    knob_fail "$WHO" "$var='${!var}': expected a whole number of seconds in 1..99999"
done
PREBUILT="${DROPE_GPU_CHECK_PREBUILT:-0}"
# The sizes of each stage: the GPU call's, or the rehearsal's on the CPU (same commands, smaller numbers).
if [ "$REHEARSE" = 1 ]; then
  BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build}"
  PREBUILT=1  # the rehearsal checks the CPU build, it does not build
  OUT_DIR="${DROPE_GPU_CHECK_OUT:-$BUILD_DIR/gpu-check-rehearsal}"
  DEVICE=cpu
  BENCH_SIZES="--heads 4 --gqa-kv-heads 2 --lengths 128,256 --warmup 1 --repeats 1 --max-seconds 2 --max-mem-gb 4"
  TRAIN_MODEL="tiny" TRAIN_SHAPE="seq_len: 64, batch_size: 4, micro_batch: 4" TRAIN_STEPS=3
  EAGER_ARGS="--device cpu --shape tiny --steps 3 --seq-len 64 --batch 4"
  REAL_C=128 REAL_SHAPE="batch_size: 2, micro_batch: 2" REAL_STEPS=2 REAL_DTYPE=float32
  REAL_MULT=2 REAL_WINDOWS=2 NIAH_LENGTHS=256,512 NIAH_TASKS=single_1 NIAH_NEW=16 GREEDY_CONTEXT=32 GREEDY_NEW=8
  BUDGET_SCALE=6  # the CPU is slower: the rehearsal checks that the commands work, not how fast
else
  BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build-gpu}"
  OUT_DIR="${DROPE_GPU_CHECK_OUT:-$BUILD_DIR/gpu-check}"
  DEVICE=cuda
  BENCH_SIZES="--heads 16 --gqa-kv-heads 4 --lengths 1024,2048,4096,8192,16384 --warmup 2 --repeats 5"
  BENCH_SIZES+=" --max-seconds 5 --max-mem-gb 40"
  TRAIN_MODEL="qwen2-0.5b" TRAIN_SHAPE="seq_len: 1024, batch_size: 16, micro_batch: 16" TRAIN_STEPS=8
  EAGER_ARGS="--steps 8"
  REAL_C=2048 REAL_SHAPE="batch_size: 32, micro_batch: 16" REAL_STEPS="${DROPE_GPU_REAL_STEPS:-120}"
  REAL_DTYPE=bfloat16 REAL_MULT=2,4 REAL_WINDOWS=8 NIAH_LENGTHS=4096,8192,16384,32768 NIAH_TASKS=all NIAH_NEW=128
  GREEDY_CONTEXT=160 GREEDY_NEW=64
  BUDGET_SCALE=1
fi
# A stage (or part of one) that needs CUDA: rehearsing, it is named and skipped (exit 77 skips the whole stage).
cuda_only() { echo "CUDA-only, skipped in the rehearsal: $*"; }
CUDA_ARCHS="${DROPE_CUDA_ARCHS:-80;90}"
PY="$ROOT/.venv/bin/python"
BENCH_ARGS_STR="${BENCH_USER[*]}"  # checked above: no value holds a space
# An option the user gave replaces the stage's own (drope-bench refuses an option given twice).
read -r -a SIZE_WORDS <<<"$BENCH_SIZES"
BENCH_SIZES=""
for ((i = 0; i < ${#SIZE_WORDS[@]}; i += 2)); do
  [ -n "${BENCH_GIVEN[${SIZE_WORDS[i]}]+x}" ] || BENCH_SIZES+="${BENCH_SIZES:+ }${SIZE_WORDS[i]} ${SIZE_WORDS[i + 1]}"
done
log() { printf '\033[1m[gpu-check]\033[0m %s\n' "$*"; }
STAGES=()
FAILED=0

if [ -e "$OUT_DIR" ] && [ ! -d "$OUT_DIR" ]; then
  log "error: DROPE_GPU_CHECK_OUT=$OUT_DIR exists and is not a directory"
  exit 2
fi
mkdir -p "$OUT_DIR/stages" || exit 2

json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

summarize() {
  local py="$PY"
  [ -x "$py" ] || py=python3
  PYTHONPATH="$ROOT/scripts" "$py" -m drope_scripts.gpu_check "$OUT_DIR" "${STAGES[@]}" ||
    log "warning: could not write the summary (needs the project venv: scripts/setup.sh)"
}

# run_stage NAME BUDGET FUNCTION: runs FUNCTION (a function below) under `timeout`, its output in
# stages/NAME.log (and on the console), its status in stages/NAME.json; then rewrites the summary.
run_stage() {
  local name="$1" budget="$2" fn="$3" var="DROPE_GPU_CHECK_BUDGET_${1^^}"
  budget="${!var:-$((budget * BUDGET_SCALE))}"  # an override is checked with the other knobs, before any stage
  [[ " ${STAGE_NAMES[*]} " == *" $name "* ]] || { log "error: stage $name is not in STAGE_NAMES"; exit 2; }
  STAGES+=("$name")
  log "stage $name (budget ${budget}s): $(describe_"$fn")"
  local status seconds=0 rc
  if [ "$DRY_RUN" = 1 ]; then
    status="dry run"
  else
    local t0 t1
    t0=$(date +%s.%N)
    timeout --kill-after=15 "$budget" bash -c "$fn" 2>&1 | tee "$OUT_DIR/stages/$name.log"
    rc=${PIPESTATUS[0]}
    t1=$(date +%s.%N)
    seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    local skipped
    skipped="$(sed -n 's/^CUDA-only, skipped in the rehearsal: //p' "$OUT_DIR/stages/$name.log" | paste -sd '|' |
      sed 's/|/; /g')"
    case "$rc" in
      0) status=ok; [ -z "$skipped" ] || status="ok; CUDA-only parts skipped: $skipped" ;;
      77) if [ "$REHEARSE" = 1 ]; then status="skipped (CUDA-only: $skipped)"; rc=0; else status="FAILED (exit 77)"; fi ;;
      124 | 137) status="FAILED (over its budget of ${budget}s)" ;;
      *) status="FAILED (exit $rc)" ;;
    esac
    [ "$rc" = 0 ] || FAILED=1
  fi
  log "stage $name: $status"
  printf '{"status": %s, "seconds": %s, "budget_s": %s, "log": %s}\n' "$(json_str "$status")" "$seconds" "$budget" \
    "$(json_str "$OUT_DIR/stages/$name.log")" > "$OUT_DIR/stages/$name.json.tmp.$$" &&
    mv "$OUT_DIR/stages/$name.json.tmp.$$" "$OUT_DIR/stages/$name.json"
  [ "$DRY_RUN" = 1 ] || summarize  # a killed run keeps what it measured
}

# ---- the stages (exported: `timeout` runs them in a child bash) ----------------------------------------------
TARGETS="drope-bench drope-train drope-model drope-data drope-eval drope_gpu_tests"
describe_stage_setup() {
  if [ "$REHEARSE" = 1 ]; then
    echo "no build; $BUILD_DIR (the CPU build) must hold $TARGETS; ldd finds every library; cuobjdump: CUDA-only"
    return
  fi
  if [ "$PREBUILT" = 1 ]; then
    echo "DROPE_GPU_CHECK_PREBUILT=1: no build; $BUILD_DIR must hold $TARGETS built elsewhere;" \
      "ldd finds every library; cuobjdump --list-elf $BUILD_DIR/drope-bench (sm_80, sm_90)"
    return
  fi
  echo "DROPE_BUILD_DIR=$BUILD_DIR DROPE_CMAKE_ARGS=-DDROPE_CUDA_ARCHS=$CUDA_ARCHS DROPE_SETUP_TARGETS='$TARGETS'" \
    "scripts/setup.sh; cuobjdump --list-elf $BUILD_DIR/drope-bench (sm_80, sm_90)"
}
stage_setup() {
  if [ "$REHEARSE" = 1 ]; then check_prebuilt && cuda_only "cuobjdump --list-elf (sm_${CUDA_ARCHS//;/, sm_} code)"; return; fi
  if [ "$PREBUILT" = 1 ]; then check_prebuilt && check_archs; return; fi
  DROPE_BUILD_DIR="$BUILD_DIR" DROPE_CMAKE_ARGS="-DDROPE_CUDA_ARCHS=$CUDA_ARCHS" DROPE_SETUP_TARGETS="$TARGETS" \
    bash "$ROOT/scripts/setup.sh" || return 1
  grep -q '^CMAKE_CUDA_COMPILER:' "$BUILD_DIR/CMakeCache.txt" ||
    { echo "error: $BUILD_DIR was configured without CUDA (no nvcc found)"; return 1; }
  check_archs
}
# A GPU node that cannot install or build (no network): the binaries come from a machine that built them with the
# same LibTorch (LD_LIBRARY_PATH names where LibTorch and the other libraries are on this node).
check_prebuilt() {
  local t bin missing
  for t in $TARGETS; do
    bin="$BUILD_DIR/$t"
    [ "$t" = drope_gpu_tests ] && bin="$BUILD_DIR/tests/$t"
    [ -x "$bin" ] || { echo "error: DROPE_GPU_CHECK_PREBUILT=1 but $bin is missing or not executable"; return 1; }
    missing="$(ldd "$bin" 2>&1 | grep 'not found')"
    [ -z "$missing" ] || { echo "error: $bin: libraries not found (set LD_LIBRARY_PATH):"; echo "$missing"; return 1; }
    echo "$bin: every library found"
  done
  [ -f "$BUILD_DIR/tests/CTestTestfile.cmake" ] || { echo "error: no $BUILD_DIR/tests/CTestTestfile.cmake"; return 1; }
}
check_archs() {
  local elf
  elf="$(cuobjdump --list-elf "$BUILD_DIR/drope-bench" 2>&1)" || { echo "cuobjdump failed: $elf"; return 1; }
  local arch
  for arch in ${CUDA_ARCHS//;/ }; do
    grep -q "sm_${arch}" <<<"$elf" || { echo "error: no sm_${arch} code in $BUILD_DIR/drope-bench"; return 1; }
    echo "drope-bench holds sm_${arch} code"
  done
}

describe_stage_gpu() { echo "nvidia-smi"; }
stage_gpu() {
  if [ "$REHEARSE" = 1 ]; then cuda_only "nvidia-smi"; return 77; fi
  nvidia-smi || return 1
  nvidia-smi --query-gpu=name --format=csv,noheader | head -1 > "$OUT_DIR/gpu-name.txt"
}

describe_stage_gpu_tests() { echo "cd $BUILD_DIR && ctest -L gpu --output-on-failure"; }
stage_gpu_tests() {
  cd "$BUILD_DIR" || return 1
  ctest -L gpu --output-on-failure 2>&1 | tee "$OUT_DIR/ctest-gpu.log"
  local rc=${PIPESTATUS[0]}
  if [ "$REHEARSE" = 1 ]; then  # without CUDA every GPU test must skip cleanly, and at least one must exist
    grep -q 'tests passed, 0 tests failed out of [1-9]' "$OUT_DIR/ctest-gpu.log" ||
      { echo "error: the GPU tests did not all skip cleanly"; return 1; }
    cuda_only "the GPU tests' CUDA cases (ctest -L gpu ran; each skipped without CUDA)"
    return "$rc"
  fi
  # A GPU test that skips here means LibTorch saw no CUDA device: not a pass.
  if grep -q '\*\*\*Skipped' "$OUT_DIR/ctest-gpu.log"; then echo "error: GPU tests skipped"; return 1; fi
  return "$rc"
}

describe_bench() {  # D
  echo "$BUILD_DIR/drope-bench attention --device $DEVICE --dtype bfloat16 --head-dim $1 $BENCH_SIZES --quiet" \
    "--json $OUT_DIR/bench-attention-d$1.json $BENCH_ARGS_STR"
}
stage_bench() {  # D
  rm -f "$OUT_DIR/bench-attention-d$1.json"  # ours, from an earlier check
  # shellcheck disable=SC2086  # the sizes and the extra arguments, split as given
  "$BUILD_DIR/drope-bench" attention --device "$DEVICE" --dtype bfloat16 --head-dim "$1" $BENCH_SIZES --quiet \
    --json "$OUT_DIR/bench-attention-d$1.json" $BENCH_ARGS_STR
}
describe_stage_bench64() { describe_bench 64; }
describe_stage_bench128() { describe_bench 128; }
stage_bench64() { stage_bench 64; }
stage_bench128() { stage_bench 128; }

describe_stage_train() {
  echo "$BUILD_DIR/drope-train $OUT_DIR/train-qwen2.yaml ($TRAIN_MODEL, random weights, bf16, $TRAIN_SHAPE," \
    "$TRAIN_STEPS steps, device $DEVICE, data.text $ROOT/docs)"
}
stage_train() {
  local peak="${DROPE_PEAK_TFLOPS:-}" name
  name="$(cat "$OUT_DIR/gpu-name.txt" 2>/dev/null)"
  if [ -z "$peak" ]; then  # dense bf16 tensor-core peaks (SXM)
    case "$name" in
      *H100* | *H200*) peak=989 ;;
      *A100*) peak=312 ;;
      *) peak=0 ;;
    esac
  fi
  rm -rf "$OUT_DIR/train-qwen2"  # ours, from an earlier check
  cat > "$OUT_DIR/train-qwen2.yaml" <<EOF
# written by scripts/gpu-check.sh: one bf16 training step of $TRAIN_MODEL, timed over $TRAIN_STEPS steps
run: {name: gpu-check-qwen2-0.5b, out_dir: $OUT_DIR/train-qwen2, seed: 0, phase: pretrain}
model: {preset: $TRAIN_MODEL}
data: {text: $ROOT/docs, $TRAIN_SHAPE}
optim: {lr: 3.0e-4, betas: [0.9, 0.95], weight_decay: 0.1}
schedule: {type: constant, warmup: 0}
train: {steps: $TRAIN_STEPS, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 0, keep_last: 1,
        clip: 1.0, dtype: bfloat16, device: $DEVICE, peak_tflops: $peak}
EOF
  "$BUILD_DIR/drope-train" "$OUT_DIR/train-qwen2.yaml"
}

describe_stage_eager() {
  echo "python bench/eager_train_cuda.py $OUT_DIR/train-qwen2-eager $EAGER_ARGS (HF Qwen2ForCausalLM, SDPA, bf16" \
    "autocast, fused AdamW; the train stage's shape, batch and optimizer: what users run instead)"
}
stage_eager() {
  rm -rf "$OUT_DIR/train-qwen2-eager"  # ours, from an earlier check
  # shellcheck disable=SC2086  # the sizes, split as given
  "$PY" "$ROOT/bench/eager_train_cuda.py" "$OUT_DIR/train-qwen2-eager" $EAGER_ARGS
}

describe_stage_compiled() {
  echo "python bench/eager_train_cuda.py $OUT_DIR/train-qwen2-compiled $EAGER_ARGS --compile (the eager stage's" \
    "HF model with torch.compile per decoder layer: what users run instead when they compile)"
}
stage_compiled() {
  rm -rf "$OUT_DIR/train-qwen2-compiled"  # ours, from an earlier check
  # shellcheck disable=SC2086  # the sizes, split as given
  "$PY" "$ROOT/bench/eager_train_cuda.py" "$OUT_DIR/train-qwen2-compiled" $EAGER_ARGS --compile
}

describe_stage_fused_off() {
  echo "$BUILD_DIR/drope-train $OUT_DIR/train-qwen2.yaml --set train.fused_loss=false --set" \
    "run.out_dir=$OUT_DIR/train-qwen2-fused-off (the train stage's run, the chunked loss in separate ops)"
}
stage_fused_off() {
  rm -rf "$OUT_DIR/train-qwen2-fused-off"  # ours, from an earlier check
  [ -s "$OUT_DIR/train-qwen2.yaml" ] ||
    { echo "error: no $OUT_DIR/train-qwen2.yaml (the train stage writes it)"; return 1; }
  "$BUILD_DIR/drope-train" "$OUT_DIR/train-qwen2.yaml" --set train.fused_loss=false \
    --set "run.out_dir=$OUT_DIR/train-qwen2-fused-off"
}

describe_stage_cuda_graphs() {
  echo "$BUILD_DIR/drope-train $OUT_DIR/train-qwen2.yaml --set train.cuda_graphs=true --set" \
    "train.chunked_loss=false --set run.out_dir=$OUT_DIR/train-qwen2-cuda-graphs (the train stage's run, the" \
    "forward and backward replayed from a CUDA graph)"
}
stage_cuda_graphs() {
  if [ "$REHEARSE" = 1 ]; then cuda_only "train.cuda_graphs (drope-train refuses it without CUDA)"; return 77; fi
  rm -rf "$OUT_DIR/train-qwen2-cuda-graphs"  # ours, from an earlier check
  [ -s "$OUT_DIR/train-qwen2.yaml" ] ||
    { echo "error: no $OUT_DIR/train-qwen2.yaml (the train stage writes it)"; return 1; }
  "$BUILD_DIR/drope-train" "$OUT_DIR/train-qwen2.yaml" --set train.cuda_graphs=true --set train.chunked_loss=false \
    --set "run.out_dir=$OUT_DIR/train-qwen2-cuda-graphs"
}

describe_stage_nccl() {
  echo "DROPE_DIST_SINGLE_RANK_GROUP=1 torchrun --no-python --nproc_per_node=1 --standalone $BUILD_DIR/drope-train" \
    "$OUT_DIR/nccl.yaml (tiny, train.device $DEVICE, 4 steps)"
}
stage_nccl() {
  rm -rf "$OUT_DIR/nccl"
  cat > "$OUT_DIR/nccl.yaml" <<EOF
# written by scripts/gpu-check.sh: NCCL single-rank smoke run
run: {name: gpu-check-nccl, out_dir: $OUT_DIR/nccl, seed: 0, phase: pretrain}
model: {preset: tiny, vocab_size: 256, max_position: 64}
data: {text: $ROOT/docs, seq_len: 64, batch_size: 8}
optim: {lr: 1.0e-3}
schedule: {type: constant, warmup: 0}
train: {steps: 4, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 0, keep_last: 1, device: $DEVICE}
EOF
  DROPE_DIST_SINGLE_RANK_GROUP=1 "$ROOT/.venv/bin/torchrun" --no-python --nproc_per_node=1 --standalone \
    "$BUILD_DIR/drope-train" "$OUT_DIR/nccl.yaml" || return 1
  grep -q '"allreduce_buckets"' "$OUT_DIR/nccl/log.jsonl" ||
    { echo "error: the log has no all-reduce buckets: the process group did not run"; return 1; }
  [ "$REHEARSE" = 0 ] || cuda_only "NCCL (the same single-rank group ran on Gloo)"
}

describe_stage_two_ranks() {
  echo "drope-train $OUT_DIR/two-ranks/base.yaml (tiny, float32, train.device $DEVICE, 4 steps) on one rank, then" \
    "torchrun --no-python --nproc_per_node=2 --standalone on the same device, train.shard none/optimizer/grads/params" \
    "with activation_checkpointing none/full/none/full; every step's loss within 1e-5 of one rank's"
}
stage_two_ranks() {
  local d="$OUT_DIR/two-ranks" run name
  rm -rf "$d"  # ours, from an earlier check
  mkdir -p "$d"
  # a copy of the text, so that every run reads the same bytes (a study may rewrite a page of docs/ meanwhile)
  cp -r "$ROOT/docs" "$d/text" || return 1
  cat > "$d/base.yaml" <<EOF
# written by scripts/gpu-check.sh: two ranks on one device against one rank
run: {name: gpu-check-two-ranks, out_dir: $d/one, seed: 0, phase: pretrain}
model: {preset: tiny, vocab_size: 256, max_position: 64}
data: {text: $d/text, seq_len: 64, batch_size: 8}
optim: {lr: 1.0e-3}
schedule: {type: constant, warmup: 0}
train: {steps: 4, log_every: 1, eval_every: 0, eval_batches: 1, checkpoint_every: 0, keep_last: 1, device: $DEVICE}
EOF
  "$BUILD_DIR/drope-train" "$d/base.yaml" || return 1
  for run in none:none optimizer:full grads:none params:full; do
    name="${run/:/-}"
    "$ROOT/.venv/bin/torchrun" --no-python --nproc_per_node=2 --standalone "$BUILD_DIR/drope-train" "$d/base.yaml" \
      --set "run.out_dir=$d/$name" --set "train.shard=${run%%:*}" --set "train.activation_checkpointing=${run##*:}" \
      > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; return 1; }
    echo "two ranks $name: $(grep -o 'backend [a-z]*' "$d/$name.log" | head -n1)"
  done
  [ "$REHEARSE" = 0 ] || cuda_only "Gloo over CUDA tensors on one GPU (the two ranks ran on the CPU)"
  "$PY" - "$d" <<'EOF'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
def losses(run):
    lines = (d / run / "log.jsonl").read_text().splitlines()
    return [j["loss"] for j in map(json.loads, lines) if "loss" in j and "step" in j]
one = losses("one")
worst = 0.0
for run in ("none-none", "optimizer-full", "grads-none", "params-full"):
    two = losses(run)
    diff = max(abs(a - b) for a, b in zip(one, two)) if len(one) == len(two) and one else float("inf")
    worst = max(worst, diff)
    print(f"two ranks {run}: max |loss - one rank's| = {diff:.2e} over {len(two)} steps")
sys.exit(0 if worst < 1e-5 else 1)
EOF
}

describe_stage_greedy() {
  echo "drope-model init --preset tiny --seed 0; drope-bench generate --context $GREEDY_CONTEXT" \
    "--new-tokens $GREEDY_NEW --device cpu, then --device $DEVICE; compare token ids"
}
stage_greedy() {
  "$BUILD_DIR/drope-model" init --preset tiny --seed 0 --out "$OUT_DIR/tiny-model" --force || return 1
  local dev
  local side
  for side in cpu cuda; do  # the "cuda" side runs on $DEVICE (the CPU, rehearsing)
    dev=cpu
    [ "$side" = cuda ] && dev="$DEVICE"
    rm -f "$OUT_DIR/greedy-$side.json"
    "$BUILD_DIR/drope-bench" generate --model "$OUT_DIR/tiny-model" --context "$GREEDY_CONTEXT" \
      --new-tokens "$GREEDY_NEW" --repeats 1 --seed 1 --device "$dev" --json "$OUT_DIR/greedy-$side.json" || return 1
  done
  [ "$REHEARSE" = 0 ] || cuda_only "the CUDA side of the comparison (it ran on the CPU)"
  "$PY" - "$OUT_DIR/greedy-cpu.json" "$OUT_DIR/greedy-cuda.json" <<'EOF'
import json, sys
a, b = (json.load(open(p))["tokens"] for p in sys.argv[1:])
same = a == b
print("greedy tokens GPU == CPU:", same, f"({len(a)} tokens)")
sys.exit(0 if same and a else 1)
EOF
}

describe_stage_real() {
  echo "SmolLM2-135M-Instruct GGUF (.cache/models, scripts/fetch_smollm2.sh) -> drope-train phase drope" \
    "(+QK-norm, $REAL_DTYPE, C=$REAL_C, $REAL_SHAPE, $REAL_STEPS steps, device $DEVICE) on prose tokenised with" \
    "its tokenizer -> fit-temperature (C=$REAL_C, x$REAL_MULT) -> NIAH 4K..32K on the GPU (here: lengths" \
    "$NIAH_LENGTHS, tasks $NIAH_TASKS, $NIAH_NEW new tokens): as released, YaRN x16, DroPE (fitted temperature)"
}
stage_real() {
  local gguf="$ROOT/.cache/models/SmolLM2-135M-Instruct.Q4_1.gguf" d="$OUT_DIR/real" ckpt
  [ -s "$gguf" ] || { echo "error: $gguf missing (scripts/fetch_smollm2.sh; carry .cache to the GPU node)"; return 1; }
  local -a text
  # The corpus scripts/make_corpus.sh builds (DROPE_CORPUS_DIR, default runs/corpus: carry it to the GPU node),
  # else our own prose, docs/**/*.md
  mapfile -t text < <(ls "${DROPE_CORPUS_DIR:-$ROOT/runs/corpus}"/*/docs.jsonl 2>/dev/null | head -n1)
  ((${#text[@]})) || mapfile -t text < <(find "$ROOT/docs" -name '*.md' | sort)
  rm -rf "$d"  # ours, from an earlier check
  mkdir -p "$d"
  "$BUILD_DIR/drope-data" prepare --input "${text[@]}" --tokenizer "$gguf" --out "$d/data" || return 1
  cat > "$d/drope.yaml" <<EOF
# written by scripts/gpu-check.sh: DroPE recalibration of the real SmolLM2-135M-Instruct at C = 2048
run: {name: gpu-check-real-drope, out_dir: $d/run, seed: 0, phase: drope, init: $gguf}
drope: {qk_norm: qk}
data: {dataset: $d/data, seq_len: $REAL_C, $REAL_SHAPE}
optim: {lr: 1.0e-3, betas: [0.9, 0.95], weight_decay: 0.1}
schedule: {type: cosine, warmup: $((REAL_STEPS < 40 ? 0 : 20)), min_lr_ratio: 0.1}
train: {steps: $REAL_STEPS, log_every: $((REAL_STEPS < 10 ? 1 : 10)), eval_every: 100, eval_batches: 4,
        checkpoint_every: 0, keep_last: 1, clip: 1.0, dtype: $REAL_DTYPE, device: $DEVICE}
EOF
  "$BUILD_DIR/drope-train" "$d/drope.yaml" || return 1
  ckpt="$(ls -d "$d"/run/checkpoints/step-* | tail -n1)"
  "$BUILD_DIR/drope-eval" fit-temperature --model "$ckpt" --tokenizer "$gguf" --data "$d/data" \
    --train-length "$REAL_C" --multipliers "$REAL_MULT" --max-windows "$REAL_WINDOWS" --out "$d/fit" || return 1
  local niah=(--lengths "$NIAH_LENGTHS" --tasks "$NIAH_TASKS" --max-new-tokens "$NIAH_NEW" --trials 2)
  "$BUILD_DIR/drope-eval" niah --model "$gguf" "${niah[@]}" --out "$d/niah-released" || return 1
  "$BUILD_DIR/drope-eval" niah --model "$gguf" --rope-scaling yarn --factor 16 "${niah[@]}" --out "$d/niah-yarn" ||
    return 1
  "$BUILD_DIR/drope-eval" niah --model "$ckpt" --tokenizer "$gguf" "${niah[@]}" --temperature auto \
    --train-length "$REAL_C" --out "$d/niah-drope" || return 1
}

export ROOT BUILD_DIR OUT_DIR CUDA_ARCHS PY TARGETS BENCH_ARGS_STR PREBUILT REHEARSE DEVICE BENCH_SIZES TRAIN_MODEL \
  TRAIN_SHAPE TRAIN_STEPS EAGER_ARGS REAL_C REAL_WINDOWS NIAH_TASKS NIAH_NEW REAL_SHAPE REAL_STEPS REAL_DTYPE REAL_MULT NIAH_LENGTHS GREEDY_CONTEXT GREEDY_NEW
export -f cuda_only check_prebuilt check_archs stage_setup stage_gpu stage_gpu_tests stage_bench stage_bench64 stage_bench128 stage_train stage_eager stage_compiled stage_nccl stage_greedy stage_real \
  stage_fused_off stage_cuda_graphs stage_two_ranks

# ---- run -------------------------------------------------------------------------------------------------------
[ "$DRY_RUN" = 1 ] && log "dry run: nothing is built or run; summary in $OUT_DIR"
[ "$REHEARSE" = 1 ] && log "rehearsal on the CPU: device cpu, small sizes, the CPU build in $BUILD_DIR"
run_stage setup 420 stage_setup
run_stage gpu 15 stage_gpu
run_stage gpu_tests 90 stage_gpu_tests
run_stage attention_bench_d64 50 stage_bench64
run_stage attention_bench_d128 50 stage_bench128
run_stage train_step_qwen2_0_5b 50 stage_train
run_stage train_step_qwen2_0_5b_eager 35 stage_eager
run_stage train_step_qwen2_0_5b_compiled 40 stage_compiled
run_stage train_step_qwen2_0_5b_fused_loss_off 30 stage_fused_off
run_stage train_step_qwen2_0_5b_cuda_graphs 30 stage_cuda_graphs
run_stage nccl_smoke 10 stage_nccl
run_stage two_ranks 45 stage_two_ranks
run_stage greedy_gpu_vs_cpu 10 stage_greedy
run_stage real_smollm2_drope 65 stage_real
summarize
log "summary: $OUT_DIR/summary.md"
cat "$OUT_DIR/summary.md" 2>/dev/null
exit "$FAILED"
