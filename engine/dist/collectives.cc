#include "engine/dist/collectives.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <memory>
#include <string>

#include "engine/dist/context.h"
#include "engine/dist/describe.h"
#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/dist/reduce_kernel.h"
#include "engine/dist/reduce_op.h"

namespace engine::dist {
namespace {

// An argument's name for a message ("data", "inputs[2]"), made into a string
// only when the message is: a call checks each entry of its lists.
struct ArgName {
  ArgName(const char* base, size_t index) : base(base), index(static_cast<int64_t>(index)) {}
  ArgName(const char* base) : base(base) {}  // implicit: a plain name converts
  std::string str() const {
    return index < 0 ? std::string(base) : std::string(base) + "[" + std::to_string(index) + "]";
  }
  const char* base;
  int64_t index = -1;
};

// The group one call runs on, resolved once.
struct GroupCall {
  const Group* group;  // nullptr when not initialised
  int rank;            // global rank, for messages
  const char* name;

  bool trivial() const { return group == nullptr || group->size() == 1; }
  int size() const { return group ? group->size() : 1; }
  int my_group_rank() const { return group ? group->rank() : 0; }
  Backend& backend() const { return group->backend(); }

  [[noreturn]] void invalid(const std::string& what) const {
    throw InvalidArgument(on_rank(rank, std::string(name) + ": " + what));
  }

  // The group rank of the global rank `root`, the call's `argument`.
  int root(int global_root, const char* argument) const {
    if (group) return group->group_rank_of(global_root, name, argument);
    return root_in_group(global_root, nullptr, name, argument);  // not distributed
  }

  void check_dense(const at::Tensor& t, const char* what) const {
    if (!t.defined()) invalid(std::string(what) + " is an undefined tensor");
    if (t.layout() != at::kStrided)
      invalid(std::string(what) + " must be a dense (strided) tensor");
  }

  void check_like(const at::Tensor& t, const at::Tensor& like, const char* what) const {
    check_dense(t, what);
    if (t.scalar_type() != like.scalar_type() || t.sizes() != like.sizes() ||
        t.device() != like.device()) {
      invalid(std::string(what) + " holds a " + describe(t) + " tensor where " + describe(like) +
              " is needed: every tensor of the call needs the same dtype, shape and device");
    }
  }

  // A tensor the call writes: no two of its elements may share memory (an
  // expanded view), or the result would depend on the order of the writes.
  void check_writable(const at::Tensor& t, ArgName what) const {
    if (at::has_internal_overlap(t) == at::MemOverlap::Yes) {
      invalid(what.str() +
              " has elements that share memory (an expanded or broadcast view?): the call "
              "writes it, so pass a tensor whose every element has memory of its own");
    }
  }

  // `written` and `read` share no memory. `in_place` says that the call
  // has an in-place form (the caller checked it was not that).
  void check_apart(const at::Tensor& written, ArgName written_name, const at::Tensor& read,
                   ArgName read_name, bool in_place = false) const {
    const at::MemOverlapStatus status = at::get_overlap_status(written, read);
    if (status != at::MemOverlapStatus::Full && status != at::MemOverlapStatus::Partial) return;
    invalid(written_name.str() + " and " + read_name.str() +
            " share memory, so the call would read what it writes: pass separate tensors" +
            (in_place ? std::string(", or, in place, exactly this rank's block") : ""));
  }

  void check_list(const std::vector<at::Tensor>& list, const at::Tensor& like,
                  const char* what) const {
    if (static_cast<int>(list.size()) != size()) {
      invalid(std::string(what) + " holds " + std::to_string(list.size()) +
              " tensors; the group has " + std::to_string(size()) + " ranks: pass one per rank");
    }
    for (const auto& t : list) check_like(t, like, what);
  }
};

GroupCall resolve(const GroupPtr& group, const char* name) {
  Context* context = current_context();
  const Group* g = group ? group.get() : (context ? context->default_group.get() : nullptr);
  const int rank = context ? context->default_group->my_global_rank() : 0;
  const GroupCall call{g, rank, name};
  if (g && !g->is_member()) {
    call.invalid("this rank is not a member of group " + g->describe() +
                 ": only its members may use it");
  }
  return call;
}

// Whether `a` and `b` are the same memory, element for element in order
// (whatever their shapes): a caller's in-place call.
bool same_memory(const at::Tensor& a, const at::Tensor& b) {
  return a.is_contiguous() && b.is_contiguous() && a.data_ptr() == b.data_ptr() &&
         a.numel() * a.element_size() == b.numel() * b.element_size();
}

// Whether `block` is exactly the `index`th of the equal blocks that the
// contiguous `whole` is cut into: a caller's in-place call. Compares
// addresses, so that a call makes no views to find out.
bool is_block_of(const at::Tensor& block, const at::Tensor& whole, int64_t index) {
  const int64_t bytes = block.numel() * block.element_size();
  return block.is_contiguous() && whole.is_contiguous() &&
         static_cast<const char*>(block.data_ptr()) ==
             static_cast<const char*>(whole.data_ptr()) + index * bytes;
}

// all_to_all's outputs share no memory with one another or with its inputs
// (the inputs may share memory among themselves: they are only read). One
// sort of the tensors' byte ranges, so that a call over thousands of ranks
// does not compare every pair; ranges of different allocations never
// overlap. Tensors that are not dense are not checked (their ranges have
// gaps).
void check_lists_apart(const GroupCall& call, const std::vector<at::Tensor>& outputs,
                       const std::vector<at::Tensor>& inputs) {
  struct Extent {
    const char* begin;
    const char* end;
    bool written;  // an output
    size_t index;
    std::string name() const { return ArgName(written ? "outputs" : "inputs", index).str(); }
  };
  std::vector<Extent> extents;
  auto add = [&](const std::vector<at::Tensor>& list, bool written) {
    for (size_t i = 0; i < list.size(); ++i) {
      const at::Tensor& t = list[i];
      if (t.numel() == 0 || !t.is_non_overlapping_and_dense()) continue;
      const char* begin = static_cast<const char*>(t.data_ptr());
      extents.push_back({begin, begin + t.numel() * t.element_size(), written, i});
    }
  };
  add(outputs, true);
  add(inputs, false);
  std::sort(extents.begin(), extents.end(),
            [](const Extent& a, const Extent& b) { return a.begin < b.begin; });
  const Extent* furthest = nullptr;          // of the extents so far, the one ending last
  const Extent* furthest_written = nullptr;  // the same among the outputs
  for (const Extent& e : extents) {
    const Extent* other = nullptr;
    if (furthest_written && e.begin < furthest_written->end)
      other = furthest_written;
    else if (e.written && furthest && e.begin < furthest->end)
      other = furthest;
    if (other) {
      call.invalid(other->name() + " and " + e.name() +
                   " share memory, so the call would read or write what it writes: pass "
                   "separate tensors");
    }
    if (!furthest || e.end > furthest->end) furthest = &e;
    if (e.written && (!furthest_written || e.end > furthest_written->end)) furthest_written = &e;
  }
}

// A contiguous stand-in for the caller's tensor, and the way back into it.
struct Staged {
  at::Tensor user;
  at::Tensor work;
  explicit Staged(const at::Tensor& t) : user(t), work(t.contiguous()) {}
  void write_back() {
    if (!work.is_same(user)) user.copy_(work);
  }
};

std::vector<at::Tensor> contiguous_all(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> out;
  out.reserve(list.size());
  for (const auto& t : list) out.push_back(t.contiguous());
  return out;
}

// One buffer for `n` tensors like `like`, stacked along a new first dimension.
at::Tensor empty_block(int n, const at::Tensor& like) {
  std::vector<int64_t> sizes{n};
  sizes.insert(sizes.end(), like.sizes().begin(), like.sizes().end());
  return at::empty(sizes, like.options());
}

// Views of one buffer, end to end, so that a backend can receive them in one
// piece (mpi does) instead of through a packed copy.
std::vector<at::Tensor> empty_list(int n, const at::Tensor& like) {
  return empty_block(n, like).unbind(0);
}

}  // namespace

WorkPtr all_reduce_async(at::Tensor& data, const std::string& op, const GroupPtr& group) {
  const GroupCall call = resolve(group, "all_reduce");
  call.check_dense(data, "data");
  call.check_writable(data, "data");
  const ReduceSpec spec = parse_reduce_op(op, data.scalar_type(), call.rank, call.name);
  if (call.trivial()) return completed_work();
  // The backend's Work holds the tensor: with nothing to do after it, no
  // Work of our own (a call of a few microseconds notices the allocations).
  if (data.is_contiguous() && !spec.mean) return call.backend().all_reduce(data, spec.op);
  auto staged = std::make_shared<Staged>(data);
  const int n = call.size();
  return then(call.backend().all_reduce(staged->work, spec.op), [staged, spec, n] {
    if (spec.mean) divide_for_mean(staged->work, n);
    staged->write_back();
  });
}

WorkPtr all_gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& data,
                         const GroupPtr& group) {
  const GroupCall call = resolve(group, "all_gather");
  call.check_dense(data, "data");
  if (call.trivial()) {
    outputs = {data};
    return completed_work();
  }
  const at::Tensor input = data.contiguous();
  at::Tensor block = empty_block(call.size(), input);
  outputs = block.unbind(0);
  return call.backend().all_gather_into_tensor(block, input);
}

WorkPtr all_gather_into_tensor_async(at::Tensor& output, const at::Tensor& data,
                                     const GroupPtr& group) {
  const GroupCall call = resolve(group, "all_gather_into_tensor");
  call.check_dense(data, "data");
  call.check_dense(output, "output");
  const int n = call.size();
  if (output.scalar_type() != data.scalar_type() || output.device() != data.device() ||
      !output.is_contiguous() || output.numel() != n * data.numel()) {
    call.invalid("output holds a " + describe(output) + " tensor where a contiguous one of " +
                 std::to_string(n) + " x " + std::to_string(data.numel()) + " elements of " +
                 describe(data) + " is needed (one data per rank of the group)");
  }
  if (!is_block_of(data, output, call.my_group_rank()))
    call.check_apart(output, "output", data, "data", true);
  const at::Tensor input = data.contiguous();
  if (call.trivial()) {
    output.view(input.sizes()).copy_(input);
    return completed_work();
  }
  return call.backend().all_gather_into_tensor(output, input);
}

WorkPtr gather_async(std::vector<at::Tensor>& outputs, const at::Tensor& data, int dst,
                     const GroupPtr& group) {
  const GroupCall call = resolve(group, "gather");
  call.check_dense(data, "data");
  const int root = call.root(dst, "dst");
  if (call.trivial()) {
    outputs = {data};
    return completed_work();
  }
  const at::Tensor input = data.contiguous();
  outputs =
      call.my_group_rank() == root ? empty_list(call.size(), input) : std::vector<at::Tensor>{};
  return call.backend().gather(outputs, input, root);
}

WorkPtr broadcast_async(at::Tensor& data, int src, const GroupPtr& group) {
  const GroupCall call = resolve(group, "broadcast");
  call.check_dense(data, "data");
  call.check_writable(data, "data");
  const int root = call.root(src, "src");
  if (call.trivial()) return completed_work();
  if (data.is_contiguous()) return call.backend().broadcast(data, root);
  auto staged = std::make_shared<Staged>(data);
  return then(call.backend().broadcast(staged->work, root), [staged] { staged->write_back(); });
}

WorkPtr reduce_async(at::Tensor& data, int dst, const std::string& op, const GroupPtr& group) {
  const GroupCall call = resolve(group, "reduce");
  call.check_dense(data, "data");
  call.check_writable(data, "data");
  const ReduceSpec spec = parse_reduce_op(op, data.scalar_type(), call.rank, call.name);
  const int root = call.root(dst, "dst");
  if (call.trivial()) return completed_work();
  auto staged = std::make_shared<Staged>(data);
  const bool is_root = call.my_group_rank() == root;
  const int n = call.size();
  return then(call.backend().reduce(staged->work, root, spec.op), [staged, spec, is_root, n] {
    if (!is_root) return;
    if (spec.mean) divide_for_mean(staged->work, n);
    staged->write_back();
  });
}

WorkPtr scatter_async(at::Tensor& data, const std::vector<at::Tensor>& scatter_list, int src,
                      const GroupPtr& group) {
  const GroupCall call = resolve(group, "scatter");
  call.check_dense(data, "data");
  const int root = call.root(src, "src");
  const bool is_root = call.my_group_rank() == root;
  call.check_writable(data, "data");
  if (is_root) {
    call.check_list(scatter_list, data, "scatter_list");
    for (size_t i = 0; i < scatter_list.size(); ++i) {
      if (static_cast<int>(i) == root && same_memory(data, scatter_list[i])) continue;
      call.check_apart(data, "data", scatter_list[i], ArgName("scatter_list", i), true);
    }
  }
  if (call.trivial()) {
    data.copy_(scatter_list[0]);
    return completed_work();
  }
  auto staged = std::make_shared<Staged>(data);
  const auto inputs = is_root ? contiguous_all(scatter_list) : std::vector<at::Tensor>{};
  return then(call.backend().scatter(staged->work, inputs, root),
              [staged, inputs] { staged->write_back(); });
}

WorkPtr reduce_scatter_async(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                             const std::string& op, const GroupPtr& group) {
  const GroupCall call = resolve(group, "reduce_scatter");
  call.check_dense(output, "output");
  const ReduceSpec spec = parse_reduce_op(op, output.scalar_type(), call.rank, call.name);
  call.check_list(inputs, output, "inputs");
  call.check_writable(output, "output");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(i) == call.my_group_rank() && same_memory(output, inputs[i])) continue;
    call.check_apart(output, "output", inputs[i], ArgName("inputs", i), true);
  }
  if (call.trivial()) {
    output.copy_(inputs[0]);
    return completed_work();
  }
  auto staged = std::make_shared<Staged>(output);
  const auto contiguous_inputs = contiguous_all(inputs);
  const int n = call.size();
  return then(call.backend().reduce_scatter(staged->work, contiguous_inputs, spec.op),
              [staged, contiguous_inputs, spec, n] {
                if (spec.mean) divide_for_mean(staged->work, n);
                staged->write_back();
              });
}

WorkPtr reduce_scatter_tensor_async(at::Tensor& output, const at::Tensor& input,
                                    const std::string& op, const GroupPtr& group) {
  const GroupCall call = resolve(group, "reduce_scatter_tensor");
  call.check_dense(output, "output");
  call.check_dense(input, "input");
  const ReduceSpec spec = parse_reduce_op(op, output.scalar_type(), call.rank, call.name);
  const int n = call.size();
  if (input.scalar_type() != output.scalar_type() || input.device() != output.device() ||
      input.numel() != n * output.numel()) {
    call.invalid("input holds a " + describe(input) + " tensor where one of " + std::to_string(n) +
                 " x " + std::to_string(output.numel()) + " elements of " + describe(output) +
                 " is needed (one output's worth per rank of the group)");
  }
  call.check_writable(output, "output");
  if (!is_block_of(output, input, call.my_group_rank()))
    call.check_apart(output, "output", input, "input", true);
  const at::Tensor blocks = input.contiguous();
  if (call.trivial()) {
    output.copy_(blocks.view(output.sizes()));
    return completed_work();
  }
  auto staged = std::make_shared<Staged>(output);
  return then(call.backend().reduce_scatter_tensor(staged->work, blocks, spec.op),
              [staged, blocks, spec, n] {
                if (spec.mean) divide_for_mean(staged->work, n);
                staged->write_back();
              });
}

WorkPtr all_to_all_async(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                         const GroupPtr& group) {
  const GroupCall call = resolve(group, "all_to_all");
  if (inputs.empty()) call.invalid("inputs is empty: pass one tensor per rank");
  call.check_list(inputs, inputs[0], "inputs");
  call.check_list(outputs, inputs[0], "outputs");
  for (size_t i = 0; i < outputs.size(); ++i)
    call.check_writable(outputs[i], ArgName("outputs", i));
  check_lists_apart(call, outputs, inputs);
  if (call.trivial()) {
    outputs[0].copy_(inputs[0]);
    return completed_work();
  }
  auto staged = std::make_shared<std::vector<Staged>>(outputs.begin(), outputs.end());
  std::vector<at::Tensor> work_outputs;
  for (auto& s : *staged) work_outputs.push_back(s.work);
  const auto contiguous_inputs = contiguous_all(inputs);
  return then(call.backend().all_to_all(work_outputs, contiguous_inputs),
              [staged, contiguous_inputs] {
                for (auto& s : *staged) s.write_back();
              });
}

WorkPtr barrier_async(const GroupPtr& group) {
  const GroupCall call = resolve(group, "barrier");
  if (call.trivial()) return completed_work();
  return call.backend().barrier();
}

WorkPtr send_async(const at::Tensor& data, int dst, int tag, const GroupPtr& group) {
  const GroupCall call = resolve(group, "send");
  call.check_dense(data, "data");
  if (call.trivial()) call.invalid("needs a group of two or more ranks");
  const int peer = call.root(dst, "dst");
  if (peer == call.my_group_rank()) call.invalid("a rank cannot send to itself");
  const at::Tensor input = data.contiguous();
  return call.backend().send(input, peer, tag);
}

WorkPtr recv_async(at::Tensor& data, int src, int tag, const GroupPtr& group) {
  const GroupCall call = resolve(group, "recv");
  call.check_dense(data, "data");
  call.check_writable(data, "data");
  if (call.trivial()) call.invalid("needs a group of two or more ranks");
  const int peer = call.root(src, "src");
  if (peer == call.my_group_rank()) call.invalid("a rank cannot receive from itself");
  auto staged = std::make_shared<Staged>(data);
  return then(call.backend().recv(staged->work, peer, tag), [staged] { staged->write_back(); });
}

void all_reduce(at::Tensor& data, const std::string& op, const GroupPtr& group) {
  all_reduce_async(data, op, group)->wait();
}

std::vector<at::Tensor> all_gather(const at::Tensor& data, const GroupPtr& group) {
  std::vector<at::Tensor> outputs;
  all_gather_async(outputs, data, group)->wait();
  return outputs;
}

void all_gather_into_tensor(at::Tensor& output, const at::Tensor& data, const GroupPtr& group) {
  all_gather_into_tensor_async(output, data, group)->wait();
}

std::vector<at::Tensor> gather(const at::Tensor& data, int dst, const GroupPtr& group) {
  std::vector<at::Tensor> outputs;
  gather_async(outputs, data, dst, group)->wait();
  return outputs;
}

void broadcast(at::Tensor& data, int src, const GroupPtr& group) {
  broadcast_async(data, src, group)->wait();
}

void reduce(at::Tensor& data, int dst, const std::string& op, const GroupPtr& group) {
  reduce_async(data, dst, op, group)->wait();
}

void scatter(at::Tensor& data, const std::vector<at::Tensor>& scatter_list, int src,
             const GroupPtr& group) {
  scatter_async(data, scatter_list, src, group)->wait();
}

void reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                    const std::string& op, const GroupPtr& group) {
  reduce_scatter_async(output, inputs, op, group)->wait();
}

void reduce_scatter_tensor(at::Tensor& output, const at::Tensor& input, const std::string& op,
                           const GroupPtr& group) {
  reduce_scatter_tensor_async(output, input, op, group)->wait();
}

void all_to_all(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& inputs,
                const GroupPtr& group) {
  all_to_all_async(outputs, inputs, group)->wait();
}

void send(const at::Tensor& data, int dst, int tag, const GroupPtr& group) {
  send_async(data, dst, tag, group)->wait();
}

void recv(at::Tensor& data, int src, int tag, const GroupPtr& group) {
  recv_async(data, src, tag, group)->wait();
}

}  // namespace engine::dist
