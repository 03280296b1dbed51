#include "testing/collective_calls.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>

#include "testing/cases.h"

namespace collective_calls {
namespace {

namespace dist = engine::dist;
using dist::GroupPtr;
using dist::WorkPtr;
using Tensors = std::vector<at::Tensor>;

// The root's world rank (a null group is the whole world).
int global(const GroupPtr& group, int root) { return group ? group->global_rank_of(root) : root; }

// inputs(r, k) for every group rank r.
Tensors of_every_rank(const Inputs& inputs, int n, int k) {
  Tensors out;
  for (int r = 0; r < n; ++r) out.push_back(inputs(r, k));
  return out;
}

// inputs(me, k) for every k: a rank's list.
Tensors list_of(const Inputs& inputs, int me, int n) {
  Tensors out;
  for (int k = 0; k < n; ++k) out.push_back(inputs(me, k));
  return out;
}

at::Tensor sum_of(const Tensors& tensors) { return cases::reduce_reference(tensors, "sum"); }

at::Tensor flat_cat(const Tensors& tensors) {
  Tensors flat;
  for (const auto& t : tensors) flat.push_back(t.flatten());
  return at::cat(flat);
}

Tensors zeros_like_each(const Tensors& tensors) {
  Tensors out;
  for (const auto& t : tensors) out.push_back(at::zeros_like(t));
  return out;
}

Collective all_reduce() {
  return {
      "all_reduce",
      Root::kNone,
      [](const Inputs& in, int me, int, int) { return Buffers{in(me, 0)}; },
      [](Buffers& b, int, const GroupPtr& g) { return dist::all_reduce_async(b.tensor, "sum", g); },
      [](const Buffers& b) { return Tensors{b.tensor}; },
      [](const Inputs& in, int, int n, int) { return Tensors{sum_of(of_every_rank(in, n, 0))}; }};
}

Collective broadcast() {
  return {"broadcast",
          Root::kSends,
          [](const Inputs& in, int me, int, int) { return Buffers{in(me, 0)}; },
          [](Buffers& b, int root, const GroupPtr& g) {
            return dist::broadcast_async(b.tensor, global(g, root), g);
          },
          [](const Buffers& b) { return Tensors{b.tensor}; },
          [](const Inputs& in, int, int, int root) { return Tensors{in(root, 0)}; }};
}

Collective reduce() {
  return {"reduce",
          Root::kReceives,
          [](const Inputs& in, int me, int, int) { return Buffers{in(me, 0)}; },
          [](Buffers& b, int root, const GroupPtr& g) {
            return dist::reduce_async(b.tensor, global(g, root), "sum", g);
          },
          [](const Buffers& b) { return Tensors{b.tensor}; },
          [](const Inputs& in, int me, int n, int root) {
            return Tensors{me == root ? sum_of(of_every_rank(in, n, 0)) : in(me, 0)};
          }};
}

Collective all_gather() {
  return {"all_gather",
          Root::kNone,
          [](const Inputs& in, int me, int, int) { return Buffers{in(me, 0)}; },
          [](Buffers& b, int, const GroupPtr& g) {
            return dist::all_gather_async(b.outputs, b.tensor, g);
          },
          [](const Buffers& b) { return b.outputs; },
          [](const Inputs& in, int, int n, int) { return of_every_rank(in, n, 0); }};
}

Collective all_gather_into_tensor() {
  return {
      "all_gather_into_tensor",
      Root::kNone,
      [](const Inputs& in, int me, int n, int) {
        Buffers b{in(me, 0)};
        b.output = at::empty({n * b.tensor.numel()}, b.tensor.options());
        return b;
      },
      [](Buffers& b, int, const GroupPtr& g) {
        return dist::all_gather_into_tensor_async(b.output, b.tensor, g);
      },
      [](const Buffers& b) { return Tensors{b.output}; },
      [](const Inputs& in, int, int n, int) { return Tensors{flat_cat(of_every_rank(in, n, 0))}; }};
}

Collective gather() {
  return {"gather",
          Root::kReceives,
          [](const Inputs& in, int me, int, int) { return Buffers{in(me, 0)}; },
          [](Buffers& b, int root, const GroupPtr& g) {
            return dist::gather_async(b.outputs, b.tensor, global(g, root), g);
          },
          [](const Buffers& b) { return b.outputs; },
          [](const Inputs& in, int me, int n, int root) {
            return me == root ? of_every_rank(in, n, 0) : Tensors{};
          }};
}

Collective scatter() {
  return {"scatter",
          Root::kSends,
          [](const Inputs& in, int me, int n, int root) {
            Buffers b;
            b.output = at::zeros_like(in(me, me));
            if (me == root) b.inputs = list_of(in, me, n);
            return b;
          },
          [](Buffers& b, int root, const GroupPtr& g) {
            return dist::scatter_async(b.output, b.inputs, global(g, root), g);
          },
          [](const Buffers& b) { return Tensors{b.output}; },
          [](const Inputs& in, int me, int, int root) { return Tensors{in(root, me)}; }};
}

Collective reduce_scatter() {
  return {"reduce_scatter",
          Root::kNone,
          [](const Inputs& in, int me, int n, int) {
            Buffers b;
            b.inputs = list_of(in, me, n);
            b.output = at::zeros_like(b.inputs.at(0));
            return b;
          },
          [](Buffers& b, int, const GroupPtr& g) {
            return dist::reduce_scatter_async(b.output, b.inputs, "sum", g);
          },
          [](const Buffers& b) { return Tensors{b.output}; },
          [](const Inputs& in, int me, int n, int) {
            return Tensors{sum_of(of_every_rank(in, n, me))};
          }};
}

Collective reduce_scatter_tensor() {
  return {"reduce_scatter_tensor",
          Root::kNone,
          [](const Inputs& in, int me, int n, int) {
            Buffers b;
            b.tensor = flat_cat(list_of(in, me, n));
            b.output = at::zeros_like(in(me, me));
            return b;
          },
          [](Buffers& b, int, const GroupPtr& g) {
            return dist::reduce_scatter_tensor_async(b.output, b.tensor, "sum", g);
          },
          [](const Buffers& b) { return Tensors{b.output}; },
          [](const Inputs& in, int me, int n, int) {
            return Tensors{sum_of(of_every_rank(in, n, me))};
          }};
}

Collective all_to_all() {
  return {"all_to_all",
          Root::kNone,
          [](const Inputs& in, int me, int n, int) {
            Buffers b;
            b.inputs = list_of(in, me, n);
            b.outputs = zeros_like_each(b.inputs);
            return b;
          },
          [](Buffers& b, int, const GroupPtr& g) {
            return dist::all_to_all_async(b.outputs, b.inputs, g);
          },
          [](const Buffers& b) { return b.outputs; },
          [](const Inputs& in, int me, int n, int) { return of_every_rank(in, n, me); }};
}

Collective barrier() {
  return {"barrier",
          Root::kNone,
          [](const Inputs&, int, int, int) { return Buffers{}; },
          [](Buffers&, int, const GroupPtr& g) { return dist::barrier_async(g); },
          [](const Buffers&) { return Tensors{}; },
          [](const Inputs&, int, int, int) { return Tensors{}; }};
}

}  // namespace

const std::vector<Collective>& all_collectives() {
  static const std::vector<Collective> collectives = {all_reduce(),
                                                      broadcast(),
                                                      reduce(),
                                                      all_gather(),
                                                      all_gather_into_tensor(),
                                                      gather(),
                                                      scatter(),
                                                      reduce_scatter(),
                                                      reduce_scatter_tensor(),
                                                      all_to_all(),
                                                      barrier()};
  return collectives;
}

}  // namespace collective_calls
