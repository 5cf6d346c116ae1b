// The environment variables drope reads, declared once (include/drope/core/environment.h).
#include "drope/core/environment.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "drope/core/strings.h"

namespace drope::env {

namespace {

constexpr Variable kVariables[] = {
    // drope's own switches.
    {"DROPE_CPU_ISA", "`avx512`, `avx2`, `baseline`, `native`", "native",
     "caps drope's own CPU kernels at this instruction-set level, to emulate an older CPU (docs/cpu-isa.md)",
     Kind::kDrope},
    {"DROPE_COMPOSITE_LAYERS", "`0`, `1`", "0, the fused CPU layers",
     "1 takes the plain-ATen composite for every layer (A/B timing of whole runs)", Kind::kDrope, Check::kSwitch},
    {"DROPE_ONEDNN_LINEAR", "`0`, `1`", "oneDNN except on Intel CPUs",
     "1 runs the CPU linear layers through oneDNN, 0 through LibTorch's own GEMM", Kind::kDrope, Check::kSwitch},
    {"DROPE_ATTENTION_AMX", "`0`, `1`", "AMX tiles where the CPU and oneDNN's cap allow them",
     "0 keeps bf16 CPU attention on the float32 FMA path (A/B timing)", Kind::kDrope, Check::kSwitch},
    {"DROPE_BF16_EMULATED", "`0`, `1`", "0, bf16 only where the CPU multiplies it natively",
     "1 makes `train.dtype: bfloat16` compute in bf16 on any CPU, emulated bf16 GEMMs included: many times slower "
     "than float32 there; for checking bf16 numerics on a CPU without AMX or AVX512-BF16 (tests)",
     Kind::kDrope, Check::kSwitch},
    {"DROPE_CUDNN_GRAPH", "`0`, `1`", "the cuDNN graph backend is listed where it was built",
     "0 takes the cuDNN graph backend out of the CUDA attention plan (A/B runs)", Kind::kDrope, Check::kSwitch},
    {"DROPE_OMP_DEFAULTS", "`0`, `1`", "1, drope's OpenMP defaults",
     "0 leaves OMP_NUM_THREADS and OMP_WAIT_POLICY to libgomp instead of drope's per-machine defaults", Kind::kDrope,
     Check::kSwitch},
    {"DROPE_SHARD_PREFETCH", "`0`, `1`", "1, prefetch the next block",
     "0 turns off the sharded run's prefetch of the next block's parameters", Kind::kDrope, Check::kSwitch},
    {"DROPE_TRACK_TENSOR_MEMORY", "`0`, `1`", "0",
     "1 counts LibTorch's live CPU tensor bytes and logs their peak (checks the memory plan)", Kind::kDrope,
     Check::kSwitch},
    {"DROPE_DIST_SINGLE_RANK_GROUP", "`0`, `1`", "0",
     "1 builds a process group even for one rank (under torchrun; the all-reduce path tested on one device)",
     Kind::kDrope, Check::kSwitch},
    {"DROPE_PEAK_FILE", "a path", "`$XDG_CACHE_HOME/drope/peak.json`, else `~/.cache/drope/peak.json`",
     "where `drope-bench peak` stores the machine's GEMM roof and drope-train reads it for MFU", Kind::kDrope},
    {"DROPE_JIEBA_DIR", "a directory", "`/usr/lib/python3/dist-packages/jieba`",
     "jieba's dictionary, for LongBench's Chinese scoring", Kind::kDrope},
    {"DROPE_TEST_FAULTS", "`0`, `1`", "0", "1 turns on the DROPE_FAULT_* hooks below (tests only)", Kind::kDrope,
     Check::kSwitch},
    // Read the way launchers and other libraries define them.
    {"RANK", "an integer", "one process", "this process's rank (torchrun); needs WORLD_SIZE", Kind::kStandard},
    {"WORLD_SIZE", "an integer ≥ 1", "one process", "the number of ranks (torchrun)", Kind::kStandard},
    {"LOCAL_RANK", "an integer", "RANK", "the rank on this node, which picks the CUDA device", Kind::kStandard},
    {"LOCAL_WORLD_SIZE", "an integer ≥ 1", "1",
     "the ranks on this node: above the CUDA device count, ranks share devices over Gloo", Kind::kStandard},
    {"MASTER_ADDR", "a host", "127.0.0.1", "the rendezvous host", Kind::kStandard},
    {"MASTER_PORT", "1 to 65535", "29500 (needed when WORLD_SIZE > 1 outside Slurm)", "the rendezvous port",
     Kind::kStandard},
    {"TORCHELASTIC_RUN_ID", "any", "not under torchrun", "marks a torchrun launch (elastic restarts)", Kind::kStandard},
    {"TORCHELASTIC_USE_AGENT_STORE", "any", "not under torchrun", "marks a torchrun launch", Kind::kStandard},
    {"TORCHELASTIC_RESTART_COUNT", "an integer", "0", "torchrun's restart number, logged and used to resume",
     Kind::kStandard},
    {"SLURM_PROCID", "an integer", "not under Slurm", "the rank under srun (when RANK is unset)", Kind::kStandard},
    {"SLURM_NTASKS", "an integer ≥ 1", "not under Slurm", "the number of ranks under srun", Kind::kStandard},
    {"SLURM_LOCALID", "an integer", "0", "the rank on this node under srun", Kind::kStandard},
    {"SLURM_RESTART_COUNT", "an integer", "0", "Slurm's requeue number", Kind::kStandard},
    {"TORCH_CPP_LOG_LEVEL", "c10's levels", "c10d's retry logs stay quiet while connecting",
     "set: c10d logs as that level says", Kind::kStandard},
    {"OMP_NUM_THREADS", "an integer ≥ 1 (OpenMP's comma-separated list for nested levels)",
     "drope sets it from the CPU affinity and cgroup quota", "OpenMP's threads", Kind::kStandard, Check::kThreadList},
    {"OMP_WAIT_POLICY", "`PASSIVE`, `ACTIVE` (any case)", "drope sets PASSIVE (unless GOMP_SPINCOUNT is set)",
     "how idle OpenMP threads wait", Kind::kStandard, Check::kWaitPolicy},
    {"GOMP_SPINCOUNT", "an integer", "libgomp's default", "libgomp's spin count; set, drope leaves OMP_WAIT_POLICY",
     Kind::kStandard},
    {"ONEDNN_MAX_CPU_ISA", "oneDNN's ISA names", "every level the CPU has",
     "oneDNN's instruction-set cap; below AVX512_CORE_BF16 drope's bf16 kernels step aside too", Kind::kStandard},
    {"DNNL_MAX_CPU_ISA", "oneDNN's ISA names", "ONEDNN_MAX_CPU_ISA", "the older name of ONEDNN_MAX_CPU_ISA",
     Kind::kStandard},
    {"GLIBC_TUNABLES", "glibc's syntax", "drope tunes malloc's mmap and trim thresholds",
     "set (or any MALLOC_*_ below): drope leaves malloc as configured", Kind::kStandard},
    {"MALLOC_MMAP_THRESHOLD_", "bytes", "see GLIBC_TUNABLES", "glibc's mmap threshold", Kind::kStandard},
    {"MALLOC_TRIM_THRESHOLD_", "bytes", "see GLIBC_TUNABLES", "glibc's trim threshold", Kind::kStandard},
    {"MALLOC_MMAP_MAX_", "an integer", "see GLIBC_TUNABLES", "glibc's mmap count limit", Kind::kStandard},
    {"XDG_CACHE_HOME", "a directory", "`~/.cache`", "where the GEMM roof file lives (see DROPE_PEAK_FILE)",
     Kind::kStandard},
    {"HOME", "a directory", "the working directory", "the home of `~/.cache`", Kind::kStandard},
    // Set by drope.
    {"DROPE_OMP_REEXEC", "`1`", "not re-executed yet",
     "set by a tool that re-executed itself with its OpenMP defaults in place; not for users", Kind::kInternal},
    // Fault injection, for the tests.
    {"DROPE_FAULT_NAN_AT_STEP", "comma-separated steps ≥ 1", "no fault", "makes the loss of those (1-based) steps NaN",
     Kind::kTestFault, Check::kSteps},
    {"DROPE_FAULT_NAN_WEIGHTS_AT_STEP", "comma-separated steps ≥ 1", "no fault",
     "poisons one weight with NaN after each of those steps", Kind::kTestFault, Check::kSteps},
    {"DROPE_FAULT_KILL_RANK_IN_CHECKPOINT", "`RANK:STEP`", "no fault",
     "kills that rank right after it wrote its shard of that step's checkpoint", Kind::kTestFault, Check::kRankStep},
    {"DROPE_FAULT_LIBTORCH", "any text", "the LibTorch loaded",
     "what drope-train reports as its LibTorch to the other ranks at start", Kind::kTestFault},
};

const char* raw(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

const char* kind_heading(Kind k) {
  switch (k) {
    case Kind::kDrope: return "drope's own";
    case Kind::kStandard: return "set by launchers, or read as other libraries read them";
    case Kind::kInternal: return "set by drope";
    case Kind::kTestFault: return "test hooks (only with `DROPE_TEST_FAULTS=1`)";
  }
  return "";
}

}  // namespace

const Variable* begin() { return kVariables; }
const Variable* end() { return kVariables + sizeof kVariables / sizeof kVariables[0]; }

const Variable* find(const char* name) {
  for (const Variable* v = begin(); v != end(); ++v)
    if (std::strcmp(v->name, name) == 0) return v;
  return nullptr;
}

bool test_faults_enabled() {
  const char* v = raw("DROPE_TEST_FAULTS");
  return v && std::strcmp(v, "1") == 0;
}

const char* get(const char* name) {
  const Variable* v = find(name);
  if (v == nullptr)
    throw std::logic_error(std::string("environment variable ") + name +
                           " is read but not declared in "
                           "src/core/environment.cpp");
  if (v->kind == Kind::kTestFault && !test_faults_enabled()) return nullptr;
  return raw(name);
}

std::string ignored_test_faults() {
  if (test_faults_enabled()) return "";
  std::string out;
  for (const Variable* v = begin(); v != end(); ++v)
    if (v->kind == Kind::kTestFault && raw(v->name)) out += (out.empty() ? "" : ", ") + std::string(v->name);
  return out;
}

std::string markdown_table() {
  std::string out = "| variable | accepts | unset | what it does |\n|---|---|---|---|\n";
  for (Kind k : {Kind::kDrope, Kind::kStandard, Kind::kInternal, Kind::kTestFault}) {
    out += std::string("| *") + kind_heading(k) + "* | | | |\n";
    for (const Variable* v = begin(); v != end(); ++v)
      if (v->kind == k)
        out += std::string("| `") + v->name + "` | " + markdown_cell(v->values) + " | " + markdown_cell(v->unset) +
               " | " + markdown_cell(v->effect) + " |\n";
  }
  return out;
}

}  // namespace drope::env
