#pragma once

#include <rapidcheck.h>

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "testing/model/ddp_cases.h"
#include "testing/model/nets.h"
#include "testing/pairwise.h"

// The sharded-training equivalence property's cases and its two sides,
// shared by the simulator suite and the process suite (testing/process):
// N ranks under MMFullyShardedDataParallel or MMZeroDataParallel end every step with the
// parameters (and the clipping's grad_norm) one process reaches on the
// concatenated batch.
namespace sharding_cases {

struct ShardingCase {
  nets::NetSpec spec;
  int world_size = 1;
  int64_t batch = 1;
  int iterations = 1;
  int64_t accumulative_counts = 1;
  // Accumulation that reduce-scatters every micro-batch instead of no_sync.
  bool communicate_every_step = false;
  // A ShardingStrategy's name, or ZERO_1 / ZERO_2 (MMZeroDataParallel).
  std::string strategy = "FULL_SHARD";
  int64_t reduce_bucket_size = 1;  // ZeRO, in elements
  bool overlap_comm = false;       // ZeRO
  int hybrid_shard_size = 0;
  // The ranks that train, as in ddp_cases::TrainingCase (a subgroup is the
  // wrapper's process_group); the whole world under HYBRID_SHARD, which
  // needs the default group.
  std::vector<int> members;
  // FSDP's mixed_precision: a dtype name, or empty for the model's own.
  std::string param_dtype, reduce_dtype, buffer_dtype;
  // FSDP's cpu_offload, with the group's communication device as device_id:
  // shards on the CPU, computing on the GPU under nccl; on the CPU backends
  // all is on the CPU, as it is without it.
  bool cpu_offload = false;
  // FSDP's deferred initialisation: each rank's net is deferred once built
  // (engine/model/init/deferred.h) and param_init_fn gives every module
  // back the values it was built with, unit by unit.
  bool deferred = false;
  // FSDP's prefetching: BACKWARD_PRE, BACKWARD_POST or NONE.
  std::string backward_prefetch = "BACKWARD_PRE";
  bool forward_prefetch = false;
  bool limit_all_gathers = true;
  // "root" (one unit), "layers" (every Linear and Conv2d), "size" (by count).
  std::string wrap = "root";
  int64_t min_num_params = 0;
  // FSDP's ignored_modules: none (""), "head0", or "body" (a module with
  // children, in nested nets).
  std::string ignored;
  bool freeze_first_bias = false;
  bool adam = false;
  std::optional<engine::optim::ClipGrad> clip_grad;
  // [iteration][seat][head] and [iteration][seat]: rank-dependent where the
  // wrapper allows it (ZeRO, and FSDP with one unit: a head, and so a
  // parameter, used on some ranks only, reached in each rank's own order);
  // alike elsewhere, since FSDP needs every rank to gather the same units in
  // one order (as PyTorch's does).
  std::vector<std::vector<std::vector<bool>>> used_heads;
  std::vector<std::vector<std::vector<int64_t>>> head_order;
  uint64_t seed = 0;
};

void showValue(const ShardingCase& c, std::ostream& os);

// Random cases of 1 to `max_world_size` ranks (HYBRID_SHARD in two replica
// groups where the world size is even, else in one).
rc::Gen<ShardingCase> sharding_case(int max_world_size);

// The options every pair of whose values the grid runs at least once
// (strategy, group size up to min(max_world_size, 4), ranks outside the
// group or none, clipping, precision, accumulation, wrap policy, optimizer,
// cpu_offload), and every combination of strategy, group size and clipping,
// in the rows that can run.
pairwise::Grid sharding_grid(int max_world_size);

// Cases with `row`'s values and random draws for everything else (a world
// of up to `max_world_size` ranks where the row puts ranks outside).
rc::Gen<ShardingCase> sharding_case(const pairwise::Grid& grid, const pairwise::Row& row,
                                    int max_world_size);

// What a side reports after each step: every full parameter, every buffer
// (as float64), and the grad_norm the clipping measured (NaN without
// clipping).
struct Run {
  ddp_cases::Snapshots parameters;
  ddp_cases::Snapshots buffers;
  std::vector<double> grad_norms;
};

// How a Run travels between the processes of a process-mode run
// (harness::collect_ranks).
c10::IValue to_ivalue(const Run& run);
void from_ivalue(const c10::IValue& value, Run& out);

// One rank under the case's wrapper; an empty Run on a rank outside the
// members (every rank of the world calls it: it makes the group). Only the
// first member starts from `initial`; every other member starts from a
// scrambled state of its own, which sync_module_states must replace by the
// first's.
Run train_rank(const ShardingCase& c, const nets::TestNet& initial, int rank);

// One process on the concatenated batch of all members; with a param_dtype,
// forward and backward run on a copy of the net in that dtype and the
// gradients come back to the float64 parameters, as FSDP's mixed precision
// defines it.
Run train_serial(const ShardingCase& c, nets::TestNet& initial);

// How far the ranks may be from the serial run: ddp_cases::kTolerance
// where everything is float64 (the same argument: only the order of sums
// and the division by the world size before them differ). Where a float32
// param_dtype or reduce_dtype rounds (relative 6e-8 per operation), gradients
// are some 1e-6 relative off the float64 serial run, and parameters after
// at most eight steps of lr <= 0.1 far less than 1e-5, while a missing
// average or cast back still shows at 1e-3 or more.
double tolerance(const ShardingCase& c);

// The same for buffers: a float32 buffer_dtype rounds the running statistics
// where the serial run keeps float64 (relative 6e-8 per update).
double buffer_tolerance(const ShardingCase& c);

// The first difference of the first member from the serial run beyond
// tolerance(c) (buffers: buffer_tolerance(c)), or between members at all
// (every member gathers the same shards: bit-identical); nullopt when there
// is none. `per_rank` holds every rank of the world.
std::optional<std::string> first_problem(const ShardingCase& c, const Run& expected,
                                         const std::vector<Run>& per_rank);

}  // namespace sharding_cases
