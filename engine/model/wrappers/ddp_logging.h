#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model/wrappers/distributed_data_parallel.h"
#include "engine/registry/config.h"

namespace engine::model {

// PyTorch DDP's logging data (DistributedDataParallel._get_ddp_logging_data)
// for one rank's MMDistributedDataParallel, with PyTorch's names. Times are
// averages over every synchronised iteration so far, in nanoseconds
// (PyTorch samples some iterations); forward: the wrapper's forward;
// backward compute: from the end of the forward to the last gradient;
// backward comm: from the first bucket's launch to the end of every
// reduction; overlap: the part of backward compute after the first launch.
struct DDPLoggingData {
  int world_size = 0;
  int rank = 0;  // in the wrapper's group
  std::string backend_name;
  int64_t iteration = 0;  // synchronised backwards so far
  bool broadcast_buffers = false;
  int64_t bucket_cap_bytes = 0;
  bool find_unused_parameters = false;
  bool static_graph = false;
  bool gradient_as_bucket_view = false;
  std::string comm_hook;  // describe() of the hook, empty for none
  int64_t num_parameter_tensors = 0;
  int64_t total_parameter_size_bytes = 0;
  std::vector<std::string> dtypes;
  std::vector<int64_t> bucket_sizes;  // bytes, the first layout
  bool has_rebuilt_buckets = false;
  std::vector<int64_t> rebuilt_bucket_sizes;
  std::vector<std::vector<size_t>> rebuilt_per_bucket_param_indices;
  // The last synchronised backward's: parameter indices in the order their
  // gradients were ready; the names of those without a gradient on this
  // rank, and their bytes.
  std::vector<size_t> gradient_ready_order;
  std::vector<std::string> unused_parameters;
  int64_t unused_parameter_size = 0;
  int64_t avg_forward_compute_time = 0;
  int64_t avg_backward_compute_time = 0;
  int64_t avg_backward_comm_time = 0;
  int64_t avg_backward_compute_comm_overlap_time = 0;

  registry::Json to_json() const;
  // One line for a log: buckets, unused parameters, the average times.
  std::string summary() const;
};

DDPLoggingData ddp_logging_data(const MMDistributedDataParallel& ddp);

}  // namespace engine::model
