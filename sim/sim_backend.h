#pragma once

#include <memory>
#include <random>

#include "engine/dist/backend.h"
#include "sim/group_state.h"
#include "sim/world_state.h"

namespace sim {

// One rank's view of one simulated group: the engine::dist::Backend that the
// dist layer calls. Each rank's thread owns its SimBackend objects.
class SimBackend : public engine::dist::Backend {
 public:
  SimBackend(std::shared_ptr<WorldState> world, std::shared_ptr<GroupState> group, int rank,
             std::shared_ptr<std::mt19937_64> jitter);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return "sim"; }
  std::optional<std::chrono::milliseconds> node_shared_wait() const override;

  engine::dist::WorkPtr all_reduce(at::Tensor& tensor, engine::dist::ReduceOp op) override;
  engine::dist::WorkPtr broadcast(at::Tensor& tensor, int root) override;
  engine::dist::WorkPtr reduce(at::Tensor& tensor, int root, engine::dist::ReduceOp op) override;
  engine::dist::WorkPtr all_gather(std::vector<at::Tensor>& outputs,
                                   const at::Tensor& input) override;
  engine::dist::WorkPtr gather(std::vector<at::Tensor>& outputs, const at::Tensor& input,
                               int root) override;
  engine::dist::WorkPtr scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                int root) override;
  engine::dist::WorkPtr reduce_scatter(at::Tensor& output, const std::vector<at::Tensor>& inputs,
                                       engine::dist::ReduceOp op) override;
  engine::dist::WorkPtr all_to_all(std::vector<at::Tensor>& outputs,
                                   const std::vector<at::Tensor>& inputs) override;
  engine::dist::WorkPtr barrier() override;
  engine::dist::WorkPtr send(const at::Tensor& tensor, int dst, int tag) override;
  engine::dist::WorkPtr recv(at::Tensor& tensor, int src, int tag) override;
  std::shared_ptr<Backend> split(const std::vector<int>& ranks) override;

 private:
  CallRecord record(const char* kind, const at::Tensor& like);
  void check_root(int root) const;
  // Runs `body`, turning the simulator's errors into the Work's error.
  engine::dist::WorkPtr run(const std::function<void()>& body);
  void jitter();

  std::shared_ptr<WorldState> world_;
  std::shared_ptr<GroupState> group_;
  int rank_;
  uint64_t collective_seq_ = 0;
  uint64_t point_to_point_seq_ = 0;
  std::shared_ptr<std::mt19937_64> jitter_rng_;
};

}  // namespace sim
