#pragma once

#include <optional>
#include <string>

#include "engine/checkpoint/sharded/sharded_checkpoint.h"
#include "engine/model/wrappers/fully_sharded_data_parallel.h"
#include "engine/strategy/strategy.h"

namespace engine::strategy {

// How FSDPStrategy writes checkpoints (PyTorch's StateDictType).
//   kSharded  each rank writes the chunks it holds, rank 0 an index and a
//             completion marker (engine/checkpoint/sharded): loadable by
//             FSDPStrategy at any world size
//   kFull     parameters and optimizer state gathered to rank 0, which
//             writes one file as the other strategies do: loadable by
//             every strategy, and by FSDPStrategy at any world size
enum class StateDictType { kSharded, kFull };

// "sharded" or "full" (also PyTorch's SHARDED_STATE_DICT, FULL_STATE_DICT);
// anything else is a ConfigError listing them.
StateDictType parse_state_dict_type(const std::string& name);

struct FSDPStrategyOptions {
  // A MODEL_WRAPPERS config; type defaults to MMFullyShardedDataParallel
  // (this strategy accepts it and MMZeroDataParallel, which derives from it).
  registry::Json model_wrapper = registry::Json::object();
  StateDictType state_dict_type = StateDictType::kSharded;
  // "torch": convert the engine's BatchNorm layers to synchronised ones
  // before wrapping, as DDPStrategy does. (mmengine's FSDPStrategy takes
  // the key from DDPStrategy and ignores it.)
  std::optional<std::string> sync_bn;
  // mmengine's skip_init_weights: the model's deferred modules
  // (engine/model/init/deferred.h) are left as zeros for load_checkpoint or
  // resume to fill, and training before either is InvalidArgument
  // (FSDPOptions::skip_init_weights). Only with MMFullyShardedDataParallel.
  bool skip_init_weights = false;
};

// mmengine's FSDPStrategy. prepare() wraps the model, then builds the
// optimizer over the shards. Checkpoints hold the same training state as
// DDPStrategy's (schedulers, every rank's RNG states, progress, extra) and
// load from either format, a full one written by any strategy included.
// Resuming at the world size that saved is bit-identical to not stopping;
// at another one the parameters and optimizer state are the saved ones and
// the generators keep their seeds.
//
// Saved inside a gradient accumulation group, a checkpoint also holds every
// rank's sharded and unsharded gradients summed so far (in the index): it
// then resumes only at the same world size and sharding.
class FSDPStrategy : public BaseStrategy {
 public:
  FSDPStrategy(EnvOptions env, FSDPStrategyOptions options);
  const FSDPStrategyOptions& options() const { return options_; }

 protected:
  std::shared_ptr<model::BaseModel> wrap_model(std::shared_ptr<model::BaseModel> model) override;
  bool takes_several_optim_wrappers() const override { return false; }
  void write_checkpoint(const std::string& path, c10::impl::GenericDict training) override;
  c10::impl::GenericDict read_checkpoint(const std::string& path, const LoadOptions& options,
                                         bool with_optimizer) override;
  c10::impl::GenericDict pending_gradients() override;
  void restore_pending_gradients(const c10::impl::GenericDict& saved,
                                 const std::string& path) override;

 private:
  model::MMFullyShardedDataParallel& wrapper();
  std::vector<std::string> optimizer_parameter_names();
  // This rank's shards, with `optimizer`'s values by parameter name if given.
  checkpoint::ShardedState sharded_state(const optim::OptimizerState* optimizer = nullptr);
  checkpoint::StateDict buffers();
  // The other names of tied parameters, each with the name its shards go
  // by: a full checkpoint lists the whole tensor under both, as PyTorch's
  // state_dict does, and loads it once.
  std::map<std::string, std::string> tied_names();
  void load_buffers(const checkpoint::StateDict& buffers, const std::string& path);
  // `by_name` put in the optimizer's order, with `groups`' group options.
  optim::OptimizerState positional(const std::map<std::string, optim::ValueDict>& by_name,
                                   const optim::OptimizerState& groups);
  // Reads `path` into the shards, the buffers, and `state`'s optimizer
  // values and `groups`; no collectives.
  c10::impl::GenericDict read_into(const std::string& path, const LoadOptions& options,
                                   bool with_optimizer, checkpoint::ShardedState& state,
                                   optim::OptimizerState& groups);
  c10::impl::GenericDict read_full_file(const std::string& path, const LoadOptions& options,
                                        bool with_optimizer, checkpoint::ShardedState& state,
                                        optim::OptimizerState& groups);

  FSDPStrategyOptions options_;
};

}  // namespace engine::strategy
