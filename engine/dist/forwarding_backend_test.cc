#include "engine/dist/forwarding_backend.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/dist/call.h"

namespace engine::dist {
namespace {

// An inner backend that implements every call and notes the last one made,
// with its integer arguments (roots, peers, tags) and reduce op.
class Noting : public Backend {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "noting"; }
  std::shared_ptr<Backend> split(const std::vector<int>&) override { return nullptr; }

  WorkPtr all_reduce(at::Tensor&, ReduceOp op) override { return note("all_reduce", {}, op); }
  WorkPtr broadcast(at::Tensor&, int root) override { return note("broadcast", {root}); }
  WorkPtr reduce(at::Tensor&, int root, ReduceOp op) override { return note("reduce", {root}, op); }
  WorkPtr all_gather(std::vector<at::Tensor>&, const at::Tensor&) override {
    return note("all_gather", {});
  }
  WorkPtr all_gather_into_tensor(at::Tensor&, const at::Tensor&) override {
    return note("all_gather_into_tensor", {});
  }
  WorkPtr gather(std::vector<at::Tensor>&, const at::Tensor&, int root) override {
    return note("gather", {root});
  }
  WorkPtr scatter(at::Tensor&, const std::vector<at::Tensor>&, int root) override {
    return note("scatter", {root});
  }
  WorkPtr reduce_scatter(at::Tensor&, const std::vector<at::Tensor>&, ReduceOp op) override {
    return note("reduce_scatter", {}, op);
  }
  WorkPtr reduce_scatter_tensor(at::Tensor&, const at::Tensor&, ReduceOp op) override {
    return note("reduce_scatter_tensor", {}, op);
  }
  WorkPtr all_to_all(std::vector<at::Tensor>&, const std::vector<at::Tensor>&) override {
    return note("all_to_all", {});
  }
  WorkPtr barrier() override { return note("barrier", {}); }
  WorkPtr send(const at::Tensor&, int dst, int tag) override { return note("send", {dst, tag}); }
  WorkPtr recv(at::Tensor&, int src, int tag) override { return note("recv", {src, tag}); }

  std::string made;
  std::vector<int> ints;
  std::optional<ReduceOp> op;

 private:
  WorkPtr note(std::string method, std::vector<int> arguments,
               std::optional<ReduceOp> reduce_op = std::nullopt) {
    made = std::move(method);
    ints = std::move(arguments);
    op = reduce_op;
    return completed_work();
  }
};

// Keeps the Call each forwarded call is described as.
class Describing : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  std::shared_ptr<Backend> split(const std::vector<int>&) override { return nullptr; }
  std::optional<Call> seen;

 protected:
  WorkPtr around(const Call& call, const std::function<WorkPtr()>& start) override {
    seen = call;
    return start();
  }
};

struct ForwardedCall {
  std::string method;
  std::function<WorkPtr(Backend&)> call;
  std::vector<int> ints;  // what the inner backend must receive
  std::optional<ReduceOp> op;
  // The Call: its kind, the tensor it describes (nullptr: an undefined
  // one), its root and peer.
  std::string kind;
  const at::Tensor* like;
  int root = -1;
  int peer = -1;
};

TEST(ForwardingBackend, HandsEveryCallToInnerDescribedAsTheCallItIs) {
  auto inner = std::make_shared<Noting>();
  Describing forwarding(inner);
  at::Tensor t = at::zeros({2});
  at::Tensor out = at::zeros({1});
  at::Tensor whole = at::zeros({4});
  std::vector<at::Tensor> list{at::zeros({2}), at::zeros({2})};
  std::vector<at::Tensor> outputs{at::zeros({2}), at::zeros({2})};
  const std::vector<at::Tensor> no_inputs;
  std::vector<at::Tensor> no_outputs;
  using R = ReduceOp;
  const std::vector<ForwardedCall> cases = {
      {"all_reduce",
       [&](Backend& b) { return b.all_reduce(t, R::kMax); },
       {},
       R::kMax,
       "all_reduce",
       &t},
      {"broadcast", [&](Backend& b) { return b.broadcast(t, 1); }, {1}, {}, "broadcast", &t, 1},
      {"reduce",
       [&](Backend& b) { return b.reduce(t, 1, R::kMin); },
       {1},
       R::kMin,
       "reduce",
       &t,
       1},
      {"all_gather",
       [&](Backend& b) { return b.all_gather(outputs, t); },
       {},
       {},
       "all_gather",
       &t},
      {"all_gather_into_tensor",
       [&](Backend& b) { return b.all_gather_into_tensor(whole, t); },
       {},
       {},
       "all_gather",
       &t},
      {"gather", [&](Backend& b) { return b.gather(outputs, t, 1); }, {1}, {}, "gather", &t, 1},
      {"scatter", [&](Backend& b) { return b.scatter(out, list, 1); }, {1}, {}, "scatter", &out, 1},
      {"reduce_scatter",
       [&](Backend& b) { return b.reduce_scatter(out, list, R::kProduct); },
       {},
       R::kProduct,
       "reduce_scatter",
       &out},
      {"reduce_scatter_tensor",
       [&](Backend& b) { return b.reduce_scatter_tensor(out, whole, R::kBxor); },
       {},
       R::kBxor,
       "reduce_scatter",
       &out},
      {"all_to_all",
       [&](Backend& b) { return b.all_to_all(outputs, list); },
       {},
       {},
       "all_to_all",
       &list[0]},
      {"all_to_all",
       [&](Backend& b) { return b.all_to_all(no_outputs, no_inputs); },
       {},
       {},
       "all_to_all",
       nullptr},
      {"barrier", [&](Backend& b) { return b.barrier(); }, {}, {}, "barrier", nullptr},
      {"send", [&](Backend& b) { return b.send(t, 1, 7); }, {1, 7}, {}, "send", &t, -1, 1},
      {"recv", [&](Backend& b) { return b.recv(t, 1, 9); }, {1, 9}, {}, "recv", &t, -1, 1},
  };
  for (const ForwardedCall& c : cases) {
    SCOPED_TRACE(c.method);
    forwarding.seen.reset();
    inner->made.clear();
    const WorkPtr work = c.call(forwarding);
    ASSERT_NE(work, nullptr);
    EXPECT_TRUE(work->is_completed());
    EXPECT_EQ(inner->made, c.method);
    EXPECT_EQ(inner->ints, c.ints);
    EXPECT_EQ(inner->op, c.op);
    ASSERT_TRUE(forwarding.seen.has_value());
    const Call& seen = *forwarding.seen;
    EXPECT_EQ(std::string(seen.kind), c.kind);
    if (c.like == nullptr) {
      EXPECT_FALSE(seen.like->defined());
    } else {
      EXPECT_EQ(seen.like, c.like);
    }
    EXPECT_EQ(seen.op, c.op);
    EXPECT_EQ(seen.root, c.root);
    EXPECT_EQ(seen.peer, c.peer);
  }
}

TEST(ForwardingBackend, TakesRankSizeNameAndDeviceFromInner) {
  Describing forwarding(std::make_shared<Noting>());
  EXPECT_EQ(forwarding.rank(), 0);
  EXPECT_EQ(forwarding.size(), 2);
  EXPECT_EQ(forwarding.name(), "noting");
  EXPECT_EQ(forwarding.comm_device(), at::Device(at::kCPU));
}

}  // namespace
}  // namespace engine::dist
