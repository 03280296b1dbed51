#include "engine/dist/backend_registry.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>

#include <functional>

#include "engine/dist/backend.h"
#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

TEST(BackendRegistry, UnknownNameListsTheAvailableBackends) {
  register_backend("fake_for_registry_test", [](const BackendOptions&) { return nullptr; });
  try {
    create_backend("nccl_missing", BackendOptions{2, 4});
    FAIL();
  } catch (const InvalidArgument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[rank 2] unknown backend 'nccl_missing'"), std::string::npos)
        << message;
    EXPECT_NE(message.find("fake_for_registry_test"), std::string::npos) << message;
  }
}

TEST(BackendRegistry, CreatesByNameWithTheOptions) {
  int seen_rank = -1;
  register_backend("fake_recording", [&](const BackendOptions& options) {
    seen_rank = options.rank;
    return nullptr;
  });
  create_backend("fake_recording", BackendOptions{5, 8});
  EXPECT_EQ(seen_rank, 5);
}

TEST(BackendRegistry, ANameCanBeRegisteredOnce) {
  register_backend("fake_once", [](const BackendOptions&) { return nullptr; });
  EXPECT_THROW(register_backend("fake_once", [](const BackendOptions&) { return nullptr; }),
               InvalidArgument);
}

// A backend that implements none of the operations.
class Bare : public Backend {
 public:
  int rank() const override { return 1; }
  int size() const override { return 2; }
  std::string name() const override { return "bare"; }
  std::shared_ptr<Backend> split(const std::vector<int>&) override { return nullptr; }
};

TEST(Backend, AnOperationTheBackendLacksFailsAtTheCallNamingBoth) {
  Bare backend;
  at::Tensor t = at::zeros({2});
  std::vector<at::Tensor> list{at::zeros({2}), at::zeros({2})};
  const std::vector<std::pair<std::string, std::function<void()>>> calls = {
      {"all_reduce", [&] { backend.all_reduce(t, ReduceOp::kSum); }},
      {"broadcast", [&] { backend.broadcast(t, 0); }},
      {"reduce", [&] { backend.reduce(t, 0, ReduceOp::kSum); }},
      {"all_gather", [&] { backend.all_gather(list, t); }},
      {"gather", [&] { backend.gather(list, t, 0); }},
      {"scatter", [&] { backend.scatter(t, list, 0); }},
      {"reduce_scatter", [&] { backend.reduce_scatter(t, list, ReduceOp::kSum); }},
      {"all_to_all", [&] { backend.all_to_all(list, list); }},
      {"barrier", [&] { backend.barrier(); }},
      {"send", [&] { backend.send(t, 0, 0); }},
      {"recv", [&] { backend.recv(t, 0, 0); }},
      // The one-buffer forms go through the list forms by default.
      {"all_gather", [&] { backend.all_gather_into_tensor(t, t.narrow(0, 0, 1)); }},
      {"reduce_scatter",
       [&] {
         at::Tensor out = at::zeros({1});
         backend.reduce_scatter_tensor(out, t, ReduceOp::kSum);
       }},
  };
  for (const auto& [operation, call] : calls) {
    try {
      call();
      ADD_FAILURE() << operation << " did not throw";
    } catch (const InvalidArgument& error) {
      EXPECT_EQ(std::string(error.what()), "group rank 1: the bare backend does not implement " +
                                               operation + "; use a backend that does");
    }
  }
}

}  // namespace
}  // namespace engine::dist
