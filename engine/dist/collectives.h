#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "engine/dist/group.h"
#include "engine/dist/work.h"

// Tensor collectives, after mmengine.dist and torch.distributed.
//
// - `group` nullptr is the default group. Roots (`src`, `dst`) are global
//   ranks, as in torch.distributed; a root outside the group is an
//   InvalidArgument.
// - `op` is a case-insensitive name: sum, mean, product, min, max, band, bor,
//   bxor. It is checked even when nothing is sent. mean = sum, then division
//   by the group size; integer tensors are truncated toward zero.
// - In place means in place: the caller's tensor object, storage and device
//   are kept, also for non-contiguous tensors (which go through a contiguous
//   copy and are written back).
// - A tensor a call writes may not have elements that share memory (an
//   expanded view), nor share memory with another tensor of the call, except
//   in the in-place forms: all_gather_into_tensor's data and
//   reduce_scatter_tensor's output as this rank's block of the other,
//   reduce_scatter's output as inputs[this rank], scatter's data as the
//   root's own entry. Either is an InvalidArgument on the rank that passed
//   it, before anything is sent (memory shared between two tensors is found
//   where both are dense, as ATen's overlap checks find it).
// - Not initialised, or a group of size 1: no-ops and identities (all_gather
//   and gather return {data}).
// - Every call has an _async form returning a Work; the results (and the mean
//   division) are in place once wait() returned. The blocking form is the
//   async form followed by wait().
namespace engine::dist {

void all_reduce(at::Tensor& data, const std::string& op = "sum", const GroupPtr& group = nullptr);
WorkPtr all_reduce_async(at::Tensor& data, const std::string& op = "sum",
                         const GroupPtr& group = nullptr);

// One new tensor per rank, in group-rank order. Every rank passes the same shape.
std::vector<at::Tensor> all_gather(const at::Tensor& data, const GroupPtr& group = nullptr);
// `outputs` is resized to the group size and filled with fresh tensors.
WorkPtr all_gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& data,
                         const GroupPtr& group = nullptr);

// PyTorch's all_gather_into_tensor: `output` (contiguous, data's dtype and
// device, group size x data.numel() elements) receives every rank's data end
// to end in group-rank order, with no per-call allocation; a 1-D output or
// one shaped [group size, data's shape] both work.
void all_gather_into_tensor(at::Tensor& output, const at::Tensor& data,
                            const GroupPtr& group = nullptr);
WorkPtr all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& data,
                                     const GroupPtr& group = nullptr);

// On `dst`, one tensor per rank; elsewhere an empty list.
std::vector<at::Tensor> gather(const at::Tensor& data, int dst = 0,
                               const GroupPtr& group = nullptr);
WorkPtr gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& data, int dst = 0,
                     const GroupPtr& group = nullptr);

// Writes `src`'s data into `data` on every other rank.
void broadcast(at::Tensor& data, int src = 0, const GroupPtr& group = nullptr);
WorkPtr broadcast_async(at::Tensor& data, int src = 0, const GroupPtr& group = nullptr);

// The reduction lands in `data` on `dst`; the other ranks' tensors are untouched.
void reduce(at::Tensor& data, int dst = 0, const std::string& op = "sum",
            const GroupPtr& group = nullptr);
WorkPtr reduce_async(at::Tensor& data, int dst = 0, const std::string& op = "sum",
                     const GroupPtr& group = nullptr);

// Group rank r's `data` receives `src`'s scatter_list[r]. scatter_list is
// needed on `src` only (group-size tensors shaped like `data`).
void scatter(at::Tensor& data, const std::vector<at::Tensor>& scatter_list = {}, int src = 0,
             const GroupPtr& group = nullptr);
WorkPtr scatter_async(at::Tensor& data, const std::vector<at::Tensor>& scatter_list = {},
                      int src = 0, const GroupPtr& group = nullptr);

// Group rank r's `output` = reduction over all ranks of their inputs[r].
void reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                    const std::string& op = "sum", const GroupPtr& group = nullptr);
WorkPtr reduce_scatter_async(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                             const std::string& op = "sum", const GroupPtr& group = nullptr);

// reduce_scatter from one tensor (PyTorch's reduce_scatter_tensor, the
// counterpart of all_gather_into_tensor): `input` (data's dtype and device,
// group size x output.numel() elements, any layout) holds one block per
// rank end to end, and group rank r's `output` = reduction over all ranks of
// their input's r-th block. `input` is left as it was.
void reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input,
                           const std::string& op = "sum", const GroupPtr& group = nullptr);
WorkPtr reduce_scatter_tensor_async(at::Tensor& output, const at::Tensor& input,
                                    const std::string& op = "sum", const GroupPtr& group = nullptr);

// Group rank r's outputs[s] receives rank s's inputs[r]; all tensors on all
// ranks share one shape and dtype.
void all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const GroupPtr& group = nullptr);
WorkPtr all_to_all_async(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                         const GroupPtr& group = nullptr);

WorkPtr barrier_async(const GroupPtr& group = nullptr);

// Point to point between global ranks of `group`; sends and receives with the
// same (src, dst, tag) pair up in order. dtype and element count must match.
void send(const at::Tensor& data, int dst, int tag = 0, const GroupPtr& group = nullptr);
WorkPtr send_async(const at::Tensor& data, int dst, int tag = 0, const GroupPtr& group = nullptr);
void recv(at::Tensor& data, int src, int tag = 0, const GroupPtr& group = nullptr);
WorkPtr recv_async(at::Tensor& data, int src, int tag = 0, const GroupPtr& group = nullptr);

}  // namespace engine::dist
