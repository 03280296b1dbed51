#include "engine/model/wrappers/ddp_logging.h"

#include <c10/core/ScalarType.h>

#include <cstdio>
#include <set>

#include "engine/dist/info.h"

namespace engine::model {
namespace {

std::string megabytes(const std::vector<int64_t>& sizes) {
  std::string out;
  char buffer[32];
  for (const int64_t bytes : sizes) {
    std::snprintf(buffer, sizeof(buffer), "%.2f", bytes / 1e6);
    out += (out.empty() ? "" : ", ") + std::string(buffer);
  }
  return out + " MB";
}

std::string milliseconds(int64_t ns) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.2f ms", ns / 1e6);
  return buffer;
}

}  // namespace

DDPLoggingData ddp_logging_data(const MMDistributedDataParallel& ddp) {
  const Reducer& reducer = ddp.reducer();
  const ReducerStats stats = reducer.stats();
  DDPLoggingData out;
  out.world_size = ddp.group()->size();
  out.rank = ddp.group()->rank();
  out.backend_name = dist::get_backend(ddp.group()).value_or("");
  out.iteration = stats.iterations;
  out.broadcast_buffers = ddp.options().broadcast_buffers;
  out.bucket_cap_bytes = reducer.options().bucket_cap_bytes;
  out.find_unused_parameters = reducer.options().find_unused_parameters;
  out.static_graph = reducer.options().static_graph;
  out.gradient_as_bucket_view = reducer.options().gradient_as_bucket_view;
  if (reducer.comm_hook()) out.comm_hook = reducer.comm_hook()->describe();
  std::set<std::string> dtypes;
  for (const auto& param : reducer.parameters()) {
    ++out.num_parameter_tensors;
    out.total_parameter_size_bytes += param.tensor.nbytes();
    dtypes.insert(c10::toString(param.tensor.scalar_type()));
  }
  out.dtypes.assign(dtypes.begin(), dtypes.end());
  out.bucket_sizes = stats.bucket_bytes;
  out.has_rebuilt_buckets = !stats.rebuilt_bucket_bytes.empty();
  out.rebuilt_bucket_sizes = stats.rebuilt_bucket_bytes;
  if (out.has_rebuilt_buckets) out.rebuilt_per_bucket_param_indices = reducer.buckets();
  out.gradient_ready_order = stats.ready_order;
  for (const size_t param : stats.unused) {
    out.unused_parameters.push_back(reducer.parameters()[param].name);
    out.unused_parameter_size += reducer.parameters()[param].tensor.nbytes();
  }
  if (ddp.timed_forwards() > 0)
    out.avg_forward_compute_time = ddp.forward_ns() / ddp.timed_forwards();
  if (stats.iterations > 0) {
    out.avg_backward_compute_time = stats.backward_compute_ns / stats.iterations;
    out.avg_backward_comm_time = stats.backward_comm_ns / stats.iterations;
    out.avg_backward_compute_comm_overlap_time = stats.overlap_ns / stats.iterations;
  }
  return out;
}

registry::Json DDPLoggingData::to_json() const {
  return {{"world_size", world_size},
          {"rank", rank},
          {"backend_name", backend_name},
          {"iteration", iteration},
          {"broadcast_buffers", broadcast_buffers},
          {"bucket_cap_bytes", bucket_cap_bytes},
          {"find_unused_parameters", find_unused_parameters},
          {"static_graph", static_graph},
          {"gradient_as_bucket_view", gradient_as_bucket_view},
          {"comm_hook", comm_hook},
          {"num_parameter_tensors", num_parameter_tensors},
          {"total_parameter_size_bytes", total_parameter_size_bytes},
          {"dtypes", dtypes},
          {"bucket_sizes", bucket_sizes},
          {"has_rebuilt_buckets", has_rebuilt_buckets},
          {"rebuilt_bucket_sizes", rebuilt_bucket_sizes},
          {"rebuilt_per_bucket_param_indices", rebuilt_per_bucket_param_indices},
          {"gradient_ready_order", gradient_ready_order},
          {"unused_parameters", unused_parameters},
          {"unused_parameter_size", unused_parameter_size},
          {"avg_forward_compute_time", avg_forward_compute_time},
          {"avg_backward_compute_time", avg_backward_compute_time},
          {"avg_backward_comm_time", avg_backward_comm_time},
          {"avg_backward_compute_comm_overlap_time", avg_backward_compute_comm_overlap_time}};
}

std::string DDPLoggingData::summary() const {
  std::string line = "ddp: " + std::to_string(world_size) + " ranks on " + backend_name + ", " +
                     std::to_string(bucket_sizes.size()) + " buckets (" + megabytes(bucket_sizes) +
                     ")";
  if (has_rebuilt_buckets) {
    line += ", rebuilt as " + std::to_string(rebuilt_bucket_sizes.size()) + " (" +
            megabytes(rebuilt_bucket_sizes) + ")";
  }
  line += ", " + std::to_string(unused_parameters.size()) + " unused parameters";
  if (!comm_hook.empty()) line += ", hook " + comm_hook;
  return line + "; per iteration: forward " + milliseconds(avg_forward_compute_time) +
         ", backward " + milliseconds(avg_backward_compute_time) + ", communication " +
         milliseconds(avg_backward_comm_time) + " (" +
         milliseconds(avg_backward_compute_comm_overlap_time) + " beside backward)";
}

}  // namespace engine::model
