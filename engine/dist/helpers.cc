#include "engine/dist/helpers.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <stdlib.h>
#include <torch/csrc/utils/tensor_flatten.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <set>

#include "engine/dist/collectives.h"
#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/dist/objects.h"
#include "engine/dist/pickle.h"
#include "engine/dist/reduce_kernel.h"
#include "engine/dist/reduce_op.h"
#include "engine/io/atomic_file.h"
#include "engine/io/file_system.h"

namespace engine::dist {
namespace fs = std::filesystem;
namespace {

int first_rank_of(const GroupPtr& group) { return group ? group->global_rank_of(0) : 0; }

// "key: Float[2, 3]" for every entry, in key order.
std::vector<std::string> entry_signatures(const std::map<std::string, at::Tensor>& data) {
  std::vector<std::string> out;
  for (const auto& [key, value] : data) {
    out.push_back(key + ": " + std::string(c10::toString(value.scalar_type())) +
                  describe(value.sizes()));
  }
  return out;
}

// The digest of a dict's keys, shapes and dtypes, which every rank compares.
int64_t digest_of(const std::vector<std::string>& signatures) {
  std::string joined;
  for (const auto& s : signatures) joined += s + "\n";
  return static_cast<int64_t>(std::hash<std::string>{}(joined));
}

// Raises CollectiveMismatch on every rank (each one calls it when the digests
// they all gathered differ), naming each rank's odd entries.
[[noreturn]] void raise_entry_mismatch(const std::vector<std::string>& mine,
                                       const GroupPtr& group) {
  std::vector<std::set<std::string>> per_rank;
  for (const auto& value : all_gather_object(c10::List<std::string>(mine), group)) {
    const auto list = value.toList();
    std::set<std::string> entries;
    for (const auto& entry : list) entries.insert(entry.get().toStringRef());
    per_rank.push_back(std::move(entries));
  }
  std::string message = "all_reduce_dict: ranks hold different keys, shapes or dtypes";
  for (size_t r = 0; r < per_rank.size(); ++r) {
    std::string odd;
    for (const auto& entry : per_rank[r]) {
      for (const auto& other : per_rank) {
        if (!other.count(entry)) {
          odd += (odd.empty() ? "" : "; ") + entry;
          break;
        }
      }
    }
    message +=
        "\n  rank " + std::to_string(r) + " alone or with some: " + (odd.empty() ? "(none)" : odd);
  }
  throw CollectiveMismatch(on_rank(get_rank(), message +
                                                   "\nPass the same keys with the same shapes and "
                                                   "dtypes on every rank."));
}

// A dict's values whose bytes fit here travel inside the one fixed-size
// record every rank gathers (with the digest), and each rank reduces them
// itself; larger ones are all-reduced once the digests agree.
constexpr int64_t kInlineDictBytes = 256;

// [digest | the flat values' bytes when they fit, else zeros].
at::Tensor dict_record(int64_t digest, const at::Tensor& flat, bool inline_values) {
  at::Tensor record = at::zeros({8 + kInlineDictBytes}, at::kByte);
  auto* bytes = record.data_ptr<uint8_t>();
  std::memcpy(bytes, &digest, 8);
  if (inline_values && flat.numel() > 0) {
    const at::Tensor values = flat.cpu().contiguous();
    std::memcpy(bytes + 8, values.data_ptr(), values.nbytes());
  }
  return record;
}

// Every rank's inline values reduced in rank order, as `flat` is laid out.
at::Tensor reduce_records(const at::Tensor& records, const at::Tensor& flat,
                          const ReduceSpec& spec) {
  at::Tensor sum = at::empty(flat.sizes(), flat.options().device(at::kCPU));
  const auto* bytes = records.data_ptr<uint8_t>();
  const int64_t stride = records.size(1);
  std::memcpy(sum.data_ptr(), bytes + 8, sum.nbytes());
  for (int64_t r = 1; r < records.size(0); ++r) {
    reduce_into(sum.data_ptr(), bytes + r * stride + 8, sum.numel(), sum.scalar_type(), spec.op);
  }
  if (spec.mean) divide_for_mean(sum, static_cast<int>(records.size(0)));
  return sum.to(flat.device());
}

void reduce_coalesced(const std::vector<at::Tensor>& bucket, const std::string& op,
                      const GroupPtr& group) {
  at::Tensor flat = torch::utils::flatten_dense_tensors(bucket);
  all_reduce(flat, op, group);
  const auto synced = torch::utils::unflatten_dense_tensors(flat, bucket);
  for (size_t i = 0; i < bucket.size(); ++i) bucket[i].copy_(synced[i]);
}

// A tensor a helper reduces: defined and dense, as the collectives need.
// `name()` makes the argument's name, only for the message.
template <typename Name>
void check_value(const at::Tensor& value, const char* call, const Name& name) {
  if (value.defined() && value.layout() == at::kStrided) return;
  throw InvalidArgument(on_rank(
      get_rank(),
      std::string(call) + ": " + name() +
          (value.defined() ? " must be a dense (strided) tensor" : " is an undefined tensor")));
}

// mmengine's _take_tensors: per dtype, in order, buckets closed once they
// reach `limit_bytes` (no limit when <= 0).
std::vector<std::vector<at::Tensor>> buckets_of(const std::vector<at::Tensor>& params,
                                                int64_t limit_bytes) {
  std::vector<std::vector<at::Tensor>> closed;
  std::map<c10::ScalarType, std::pair<std::vector<at::Tensor>, int64_t>> open;
  for (const auto& p : params) {
    auto& [bucket, bytes] = open[p.scalar_type()];
    bucket.push_back(p);
    bytes += p.numel() * p.element_size();
    if (limit_bytes > 0 && bytes >= limit_bytes) {
      closed.push_back(std::move(bucket));
      bucket.clear();
      bytes = 0;
    }
  }
  for (auto& [dtype, entry] : open) {
    if (!entry.first.empty()) closed.push_back(std::move(entry.first));
  }
  return closed;
}

std::vector<c10::IValue> merge_round_robin(const std::vector<std::vector<c10::IValue>>& parts,
                                           int64_t size) {
  std::vector<c10::IValue> out;
  size_t longest = 0;
  for (const auto& part : parts) longest = std::max(longest, part.size());
  for (size_t i = 0; i < longest && static_cast<int64_t>(out.size()) < size; ++i) {
    for (const auto& part : parts) {
      if (i < part.size() && static_cast<int64_t>(out.size()) < size) out.push_back(part[i]);
    }
  }
  return out;
}

std::vector<c10::IValue> to_vector(const c10::IValue& list) {
  const auto ref = list.toListRef();
  return std::vector<c10::IValue>(ref.begin(), ref.end());
}

c10::IValue to_list(const std::vector<c10::IValue>& values) {
  c10::impl::GenericList list(c10::AnyType::get());
  for (const auto& v : values) list.push_back(v);
  return list;
}

// What every rank throws when a step of collect_results failed somewhere.
[[noreturn]] void collect_failed(const std::string& failures) {
  throw DistError(on_rank(get_rank(), "collect_results: " + failures));
}

// A fresh folder under `tmpdir` (default: the system's temp dir), made by
// rank 0 and shared with every rank.
fs::path call_folder(const std::optional<std::string>& tmpdir) {
  std::string folder, failure;
  if (get_rank() == 0) {
    failure = failure_of([&] {
      const fs::path base = tmpdir ? fs::path(*tmpdir) : fs::temp_directory_path();
      std::error_code error;
      fs::create_directories(base, error);
      std::string pattern = (base / "collect_results_XXXXXX").string();
      if (error || !mkdtemp(pattern.data())) {
        throw std::runtime_error("in " + base.string() + " (" +
                                 (error ? error.message() : std::strerror(errno)) +
                                 "): check that it is writable or pass another tmpdir");
      }
      folder = pattern;
    });
  }
  // Only rank 0 acts, so one broadcast carries its folder or its failure.
  std::vector<c10::IValue> shared = {folder, failure};
  broadcast_object_list(shared, 0);
  const std::string& failed = shared[1].toStringRef();
  if (!failed.empty()) collect_failed("rank 0 could not create the call's folder: " + failed);
  return shared[0].toStringRef();
}

fs::path part_path(const fs::path& folder, int rank) {
  return folder / ("part_" + std::to_string(rank) + ".pkl");
}

at::Tensor read_file(const fs::path& path) {
  const std::string bytes = io::read_file(path.string());
  at::Tensor out = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  // An empty tensor has no storage: memcpy may not take its null.
  if (!bytes.empty()) std::memcpy(out.data_ptr(), bytes.data(), bytes.size());
  return out;
}

std::vector<c10::IValue> read_parts(const fs::path& folder, int64_t size) {
  std::vector<std::vector<c10::IValue>> parts;
  for (int r = 0; r < get_world_size(); ++r) {
    const fs::path path = part_path(folder, r);
    parts.push_back(to_vector(unpickle(read_file(path), path.string())));
  }
  return merge_round_robin(parts, size);
}

// Each rank writes its part; once every rank has, rank 0 reads them all and
// removes the folder. Each step ends in a collective that tells every rank
// whether any rank failed, so that a failure anywhere stops every rank.
std::optional<std::vector<c10::IValue>> collect_through_files(
    const std::vector<c10::IValue>& part, int64_t size, const std::optional<std::string>& tmpdir,
    io::FileSystem& file_system) {
  const int rank = get_rank();
  const fs::path folder = call_folder(tmpdir);
  const std::string written = failures_of_ranks(
      failure_of([&] {
        const at::Tensor bytes = pickle(to_list(part));
        io::write_atomically(part_path(folder, rank).string(),
                             {std::string_view(static_cast<const char*>(bytes.data_ptr()),
                                               static_cast<size_t>(bytes.numel()))},
                             file_system);
      }),
      "write its part");
  std::optional<std::vector<c10::IValue>> merged;
  std::string failure;
  if (rank == 0) {
    if (written.empty()) failure = failure_of([&] { merged = read_parts(folder, size); });
    std::error_code removed;
    io::remove_all(folder.string(), removed);
    if (failure.empty() && removed) failure = folder.string() + ": " + removed.message();
  }
  if (!written.empty()) collect_failed(written);
  const std::string read = failures_of_ranks(failure, "read the parts back and remove them");
  if (!read.empty()) collect_failed(read);
  return merged;
}

}  // namespace

std::string failure_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

std::string failures_of_ranks(const std::string& failure, const std::string& what) {
  std::vector<std::string> failures;
  if (is_distributed()) {
    for (const auto& one : all_gather_object(failure)) failures.push_back(one.toStringRef());
  } else {
    failures.push_back(failure);
  }
  return describe_failures(failures, what);
}

std::string describe_failures(const std::vector<std::string>& failures, const std::string& what) {
  std::string lines;
  for (size_t rank = 0; rank < failures.size(); ++rank) {
    if (failures[rank].empty()) continue;
    lines += (lines.empty() ? "" : "\n  ") + std::string("rank ") + std::to_string(rank) +
             " could not " + what + ": " + failures[rank];
  }
  return lines;
}

int64_t sync_random_seed(const GroupPtr& group) {
  std::random_device device;
  const int64_t draw = std::uniform_int_distribution<int64_t>(0, (int64_t{1} << 31) - 1)(device);
  if (get_world_size(group) == 1) return draw;
  at::Tensor seed =
      at::full({1}, draw, at::TensorOptions(at::kLong).device(get_comm_device(group)));
  broadcast(seed, first_rank_of(group), group);
  return seed.item<int64_t>();
}

void all_reduce_dict(std::map<std::string, at::Tensor>& data, const std::string& op,
                     const GroupPtr& group) {
  for (const auto& [key, value] : data) {
    check_value(value, "all_reduce_dict", [&] { return "data[\"" + key + "\"]"; });
    parse_reduce_op(op, value.scalar_type(), get_rank(), "all_reduce_dict");
  }
  if (get_world_size(group) == 1) return;
  std::vector<at::Tensor> values;
  for (const auto& [key, value] : data) values.push_back(value);
  const at::Tensor flat =
      values.empty() ? at::empty({0}) : torch::utils::flatten_dense_tensors(values);
  const ReduceSpec spec = parse_reduce_op(op, flat.scalar_type(), get_rank(), "all_reduce_dict");
  // Whether the values ride in the record depends only on what the digest
  // covers, so ranks whose digests agree decide alike.
  const bool inline_values = static_cast<int64_t>(flat.nbytes()) <= kInlineDictBytes &&
                             can_reduce(flat.scalar_type(), spec.op);
  const std::vector<std::string> mine = entry_signatures(data);
  const int64_t digest = digest_of(mine);
  at::Tensor record = dict_record(digest, flat, inline_values).to(get_comm_device(group));
  const at::Tensor records = at::stack(all_gather(record, group)).cpu();
  if (!records.narrow(1, 0, 8).eq(records[0].narrow(0, 0, 8)).all().item<bool>()) {
    raise_entry_mismatch(mine, group);
  }
  if (data.empty()) return;
  at::Tensor reduced = flat;
  if (inline_values) {
    reduced = reduce_records(records, flat, spec);
  } else {
    all_reduce(reduced, op, group);
  }
  int64_t offset = 0;
  for (auto& [key, value] : data) {
    const int64_t n = value.numel();
    value = reduced.narrow(0, offset, n).view(value.sizes());
    offset += n;
  }
}

void all_reduce_params(const std::vector<at::Tensor>& params, bool coalesce, int bucket_size_mb,
                       const std::string& op, const GroupPtr& group) {
  for (size_t i = 0; i < params.size(); ++i) {
    check_value(params[i], "all_reduce_params",
                [i] { return "params[" + std::to_string(i) + "]"; });
    parse_reduce_op(op, params[i].scalar_type(), get_rank(), "all_reduce_params");
  }
  if (get_world_size(group) == 1) return;
  if (!coalesce) {
    for (auto p : params) all_reduce(p, op, group);
    return;
  }
  for (const auto& bucket : buckets_of(params, int64_t{bucket_size_mb} * 1024 * 1024)) {
    reduce_coalesced(bucket, op, group);
  }
}

std::optional<std::vector<c10::IValue>> collect_results(const std::vector<c10::IValue>& part,
                                                        int64_t size, const std::string& device,
                                                        const std::optional<std::string>& tmpdir,
                                                        io::FileSystem& file_system) {
  if (device != "cpu" && device != "gpu") {
    throw InvalidArgument(on_rank(get_rank(),
                                  "collect_results: device must be \"cpu\" (through "
                                  "files) or \"gpu\" (through all_gather), got \"" +
                                      device + "\""));
  }
  if (size < 0) {
    throw InvalidArgument(
        on_rank(get_rank(), "collect_results: size must be >= 0, got " + std::to_string(size)));
  }
  if (get_world_size() == 1) return merge_round_robin({part}, size);
  if (device == "cpu") return collect_through_files(part, size, tmpdir, file_system);
  std::vector<std::vector<c10::IValue>> parts;
  for (const auto& value : all_gather_object(to_list(part))) parts.push_back(to_vector(value));
  if (get_rank() != 0) return std::nullopt;
  return merge_round_robin(parts, size);
}

namespace {

// Runs `collective` on `data` where the group's backend can carry it.
template <typename Collective>
void on_comm_device(at::Tensor& data, const GroupPtr& group, Collective collective) {
  const at::Device device = get_comm_device(group);
  if (data.device() == device) {
    collective(data);
    return;
  }
  at::Tensor moved = data.to(device);
  collective(moved);
  data.copy_(moved);
}

}  // namespace

void all_reduce_anywhere(at::Tensor& data, const std::string& op, const GroupPtr& group) {
  on_comm_device(data, group, [&](at::Tensor& t) { all_reduce(t, op, group); });
}

void broadcast_anywhere(at::Tensor& data, int src, const GroupPtr& group) {
  on_comm_device(data, group, [&](at::Tensor& t) { broadcast(t, src, group); });
}

std::vector<at::Tensor> all_gather_anywhere(const at::Tensor& data, const GroupPtr& group) {
  std::vector<at::Tensor> gathered = all_gather(data.to(get_comm_device(group)), group);
  for (auto& tensor : gathered) tensor = tensor.to(data.device());
  return gathered;
}

}  // namespace engine::dist
