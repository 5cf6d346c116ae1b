# shellcheck shell=bash
# isa_env LEVEL: the environment that caps drope's CPU kernels and LibTorch's own dispatch (ATen, oneDNN, MKL)
# together at one instruction-set level (avx512, avx2 or baseline: SSE4), from the table isa_levels.txt beside
# this file. Sourced by bench/isa.sh; isa_runs probes whether this CPU runs a level.
ISA_LEVELS_FILE="$(dirname "${BASH_SOURCE[0]}")/isa_levels.txt"

isa_env() {
  local env
  env="$(awk -v level="$1" '/^[^#]/ && $1 == level { $1 = ""; sub(/^ +/, ""); print }' "$ISA_LEVELS_FILE")"
  if [ -z "$env" ]; then
    echo "isa_env: unknown level '$1' (expected $(awk '/^[^#]/ { printf "%s%s", sep, $1; sep = ", " }' \
      "$ISA_LEVELS_FILE"))" >&2
    return 2
  fi
  echo "$env"
}

# isa_runs BIN LEVEL [ERRFILE]: succeeds when drope's kernels run at LEVEL on this CPU (a 16-token attention
# through BIN/drope-bench); the tool's refusal goes to ERRFILE (default: discarded).
isa_runs() {
  env DROPE_CPU_ISA="$2" "$1/drope-bench" attention --lengths 16 --cases causal --impls ours --repeats 1 \
    --warmup 0 --quiet >/dev/null 2>"${3:-/dev/null}"
}
