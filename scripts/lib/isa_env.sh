# shellcheck shell=bash
# isa_env LEVEL: the environment that caps drope's CPU kernels and LibTorch's own dispatch (ATen, oneDNN, MKL)
# together at one instruction-set level: avx512, avx2 or baseline (SSE4). Sourced by bench/isa.sh and
# quickstart_isa.sh; isa_runs probes whether this CPU runs a level.
isa_env() {
  case "$1" in
    avx512) echo "DROPE_CPU_ISA=avx512 ATEN_CPU_CAPABILITY=avx512 ONEDNN_MAX_CPU_ISA=AVX512_CORE MKL_ENABLE_INSTRUCTIONS=AVX512" ;;
    avx2) echo "DROPE_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2" ;;
    baseline) echo "DROPE_CPU_ISA=baseline ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41 MKL_ENABLE_INSTRUCTIONS=SSE4_2" ;;
    *) echo "isa_env: unknown level '$1' (expected avx512, avx2 or baseline)" >&2; return 2 ;;
  esac
}

# isa_runs BIN LEVEL [ERRFILE]: succeeds when drope's kernels run at LEVEL on this CPU (a 16-token attention
# through BIN/drope-bench); the tool's refusal goes to ERRFILE (default: discarded).
isa_runs() {
  env DROPE_CPU_ISA="$2" "$1/drope-bench" attention --lengths 16 --cases causal --impls ours --repeats 1 \
    --warmup 0 --quiet >/dev/null 2>"${3:-/dev/null}"
}
