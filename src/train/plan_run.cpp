#include "drope/train/plan_run.h"

#include <fmt/format.h>

#include "drope/io/model_io.h"
#include "drope/train/memory_plan.h"
#include "drope/train/recompute.h"

namespace drope::train {

void run_plan(const RunConfig& cfg, const PlanRun& r) {
  PlanInput in;
  in.model = cfg.init.empty() ? cfg.model : io::load_model_config_dir(cfg.init);
  in.seq_len = cfg.data.seq_len;
  in.world = r.world;
  in.micro_batch = micro_batch_size(cfg, r.world);
  in.activation_checkpointing = cfg.train.activation_checkpointing;
  check_activation_checkpointing(in.activation_checkpointing, in.model.num_layers, cfg.source);
  in.bf16 = cfg.train.dtype == TrainDType::kBFloat16;
  in.chunked_loss = cfg.train.chunked_loss;
  in.allreduce_bucket_mb = cfg.train.allreduce_bucket_mb;
  if (r.json) {
    for (auto mode : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGrads, ShardMode::kParams}) {
      const auto p = plan_memory(in, mode);
      fmt::print("{{\"shard\": \"{}\", \"params\": {}, \"grads\": {}, \"optimizer\": {}, \"activations\": {}, "
                 "\"logits\": {}, \"comm\": {}, \"total\": {}, \"largest_micro_batch\": {}}}\n",
                 name_of(mode), p.params, p.grads, p.optimizer, p.activations, p.logits, p.comm, p.total(),
                 largest_micro_batch(in, mode, int64_t(r.gpu_mem_gb * 1e9)));
    }
    return;
  }
  fmt::print("{}: configured train.shard {}\n{}", cfg.source, name_of(cfg.train.shard), plan_table(in, r.gpu_mem_gb));
}

}  // namespace drope::train
