#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/io/file_system.h"

// mmengine.dist's higher-level helpers.
namespace engine::dist {

// A seed in [0, 2^31) drawn on rank 0 and shared with every rank.
int64_t sync_random_seed(const GroupPtr& group = nullptr);

// All-reduces every value of `data`: keys sorted, values flattened into one
// buffer (dtypes promoted as torch.cat does, so mixed int/float values come
// back float), reduced, split back into `data`. Every rank first gathers a
// fixed-size record with a digest of every rank's keys, shapes and dtypes;
// values of up to 256 bytes ride in it and each rank reduces them in rank
// order (one collective in all), larger ones are all-reduced after it.
// Ranks whose keys, shapes or dtypes differ get CollectiveMismatch on every
// rank, naming the differing keys (mmengine hangs there). An undefined or
// sparse value is an InvalidArgument naming its key, before anything is sent.
void all_reduce_dict(std::map<std::string, at::Tensor>& data, const std::string& op = "sum",
                     const GroupPtr& group = nullptr);

// All-reduces parameters in place. coalesce: flatten into buckets first
// (bucket_size_mb > 0: buckets of at most that size per dtype; -1: one bucket
// per dtype) - the same result as reducing tensor by tensor. An undefined or
// sparse parameter is an InvalidArgument naming its index.
void all_reduce_params(const std::vector<at::Tensor>& params, bool coalesce = true,
                       int bucket_size_mb = -1, const std::string& op = "sum",
                       const GroupPtr& group = nullptr);

// all_reduce, broadcast and all_gather of a tensor wherever it lives: through
// a copy on the group's communication device (the GPU on nccl, which moves
// CUDA tensors only) when it is elsewhere, the result written back into
// `data` (all_gather: returned on `data`'s device). For small host-side
// values (flags, norms, orders) that every backend must carry. A bad argument
// is the collective's InvalidArgument, which names that collective.
void all_reduce_anywhere(at::Tensor& data, const std::string& op = "sum",
                         const GroupPtr& group = nullptr);
void broadcast_anywhere(at::Tensor& data, int src = 0, const GroupPtr& group = nullptr);
std::vector<at::Tensor> all_gather_anywhere(const at::Tensor& data,
                                            const GroupPtr& group = nullptr);

// Collects every rank's results on rank 0, in dataset order for a sampler that
// gives rank r the indices r, r+ws, r+2ws...: rank0[0], rank1[0], ...,
// rank0[1], ... (parts may differ in length), cut to `size`. Other ranks get
// std::nullopt. Not distributed: the part, cut to `size`.
//
// device "cpu": through files in `tmpdir` (which must be on a filesystem all
// ranks share; default: a new folder under the system temp dir, fine on one
// node). Each call works in a fresh sub-folder that it removes afterwards;
// `tmpdir` itself is never deleted. device "gpu": through all_gather_object.
// None results are kept in place.
//
// When any rank fails (rank 0 cannot create the folder, a rank cannot pickle
// or write its part, rank 0 cannot read one back), every rank throws the same
// DistError naming each rank that failed and why, and the call's folder is
// removed; no rank is left waiting. `fs`: where each rank writes its part
// (io::write_atomically; tests put a failing one there).
std::optional<std::vector<c10::IValue>> collect_results(
    const std::vector<c10::IValue>& part, int64_t size, const std::string& device = "cpu",
    const std::optional<std::string>& tmpdir = std::nullopt,
    io::FileSystem& fs = io::posix_file_system());

// The message of what `action` threw ("" if it returned).
std::string failure_of(const std::function<void()>& action);

// Collective over the default group (alone when not distributed): every rank
// learns every rank's `failure` ("" for none). Returns "" when none failed,
// else a line "rank K could not <what>: <its failure>" for each rank K that
// failed, the same on every rank. Put around work that each rank does alone
// (a write, a read) so that no rank goes on while another stopped.
std::string failures_of_ranks(const std::string& failure, const std::string& what);

// failures_of_ranks's lines for failures already gathered, indexed by rank.
std::string describe_failures(const std::vector<std::string>& failures, const std::string& what);

}  // namespace engine::dist
