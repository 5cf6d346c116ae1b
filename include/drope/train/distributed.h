// Data-parallel plumbing over c10d: the torchrun / Slurm environment, a process group (Gloo on CPU,
// NCCL on CUDA when built with it), bucketed gradient all-reduce overlapped with backward (GradSync),
// scalar reductions and barriers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

namespace drope::train {

struct DistEnv {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;
  int restart_count = 0;    // TORCHELASTIC_RESTART_COUNT: > 0 means torchrun restarted us
  bool torchrun = false;    // launched by torchrun (it hosts the TCPStore; we connect as clients)
  bool slurm = false;       // launched by srun (rank 0 hosts the TCPStore)
  // DROPE_DIST_SINGLE_RANK_GROUP=1: create the process group (NCCL on CUDA) even at world size 1, so that a
  // single-GPU torchrun run goes through the collectives (scripts/gpu-check.sh's NCCL smoke run).
  bool single_rank_group = false;
};

// Reads RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/MASTER_PORT (torchrun) or SLURM_PROCID/SLURM_NTASKS/
// SLURM_LOCALID (+ MASTER_ADDR/MASTER_PORT); validates them with messages naming the variable.
DistEnv read_dist_env();

// A started collective; wait() returns when it is done (a dead peer: one clear error). Waiting twice is a no-op.
class Collective {
 public:
  void wait();

 private:
  friend class Distributed;
  std::function<void()> wait_;
};

// What every rank must agree on before the first step, as (name, value) pairs: the resolved run config, the
// world size, the dataset's and the binary's identity (Trainer builds it).
using Consensus = std::vector<std::pair<std::string, std::string>>;

// Set when SIGTERM or SIGINT asked this process to stop (install_stop_handlers' signal thread): a training run
// checkpoints and stops, and a wait for the other ranks at start gives up at once.
std::atomic<bool>& stop_signal();

// For a rank that fails before it joined the others (a config missing on its node, a bad flag): posts `error` in
// the rendezvous store where rank 0 compares the ranks, so that every rank stops at once naming this rank and its
// error instead of waiting train.dist_timeout_s for it. Best effort and bounded (a few seconds); a no-op for one
// process, after this process joined, or where no store is reachable.
void tell_peers_start_failed(const std::string& error);

class Distributed {
 public:
  // world == 1 (without env.single_rank_group): no process group, every call is local. `timeout_s` bounds
  // every collective. With a non-empty `agree`, the ranks compare it before the process group forms: a rank
  // whose settings differ from rank 0's ends every rank naming the first differing name and both values, and a
  // rank that never arrives ends the others within `timeout_s` naming it.
  Distributed(const DistEnv& env, const torch::Device& device, double timeout_s, const Consensus& agree = {});
  ~Distributed();
  int rank() const { return env_.rank; }
  int world() const { return env_.world; }
  bool is_main() const { return env_.rank == 0; }
  const DistEnv& env() const { return env_; }
  std::string backend() const;
  // Whether a process group runs the collectives (world > 1, or a forced single-rank group).
  bool grouped() const;

  // Mean of a scalar over ranks.
  double mean(double v);
  // Copies rank 0's tensors to every rank.
  void broadcast(const std::vector<torch::Tensor>& tensors);
  void barrier();
  // Sum of a scalar over ranks.
  double sum(double v);
  // The ranks where `flag` is true, in rank order, on every rank.
  std::vector<int> ranks_where(bool flag);
  // out (n) = the sum over ranks of chunk `rank` of in (world·n), asynchronous.
  Collective reduce_scatter(const torch::Tensor& out, const torch::Tensor& in);
  // out (world·n) = every rank's in (n), in rank order, asynchronous.
  Collective all_gather(const torch::Tensor& out, const torch::Tensor& in);

 private:
  friend class GradSync;
  struct Impl;
  void agree(const Consensus& mine);
  DistEnv env_;
  std::unique_ptr<Impl> impl_;
};

// Gradient all-reduce overlapped with backward (as PyTorch DDP does). Parameters are grouped into buckets
// of about `bucket_bytes` in reverse order (≈ the order backward finishes their gradients). During an
// armed backward, a hook after each parameter's gradient accumulation counts it in; when a bucket is
// complete its asynchronous all-reduce starts while backward goes on. Buckets start strictly in index
// order on every rank, so the collectives match up. finish() starts what is left, waits, and writes the
// averaged gradients back.
class GradSync {
 public:
  GradSync(Distributed& dist, std::vector<torch::Tensor> params, int64_t bucket_bytes = 25 << 20);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Call before the backward of the step's last micro-batch (earlier micro-batches only accumulate).
  void arm();
  // Averages every parameter's gradient over ranks (all ranks must call it, armed or not).
  void finish();
  int64_t buckets() const;
  // Buckets whose all-reduce started during backward in the last finished step.
  int64_t overlapped() const { return overlapped_; }

  struct State;  // shared with the autograd hooks (defined in distributed.cpp)

 private:
  std::shared_ptr<State> state_;
  int64_t overlapped_ = 0;
};

}  // namespace drope::train
