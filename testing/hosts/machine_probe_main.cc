// What a rank of a job over several machines sees of them, checked on each
// rank of a job that engine-launch starts on every emulated host
// (emulated_hosts.sh), nproc_per_node ranks a host:
//   - its node's ranks share its hostname, and no other node's do;
//   - get_local_rank and get_local_size after init_local_group agree with
//     torchrun's LOCAL_RANK and LOCAL_WORLD_SIZE, and the local group sums
//     its node's ranks only;
//   - node-shared buffers are shared memory on the local group and ordinary
//     memory on the world (which spans machines), and both reduce exactly;
//   - a reduce_scatter and an all_gather large enough for the staging area
//     are exact on both groups.
//   machine_probe_main BACKEND [LAUNCHER]    (LAUNCHER: init_dist's, default pytorch)
// Exits 0 when every rank passed; each failure is printed by its rank.
#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "engine/dist/dist.h"
#include "testing/process/verdict.h"

namespace {

namespace dist = engine::dist;

int env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) throw std::runtime_error(std::string(name) + " is not set");
  return std::stoi(value);
}

std::string this_hostname() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

class Probe {
 public:
  Probe() : rank_(dist::get_rank()), world_(dist::get_world_size()) {}

  void expect(bool holds, const std::string& what) {
    if (holds) return;
    std::cerr << "[rank " << rank_ << "] " << what << "\n";
    passed_ = false;
  }

  bool passed() const { return passed_; }

  void hostnames(int per_node) {
    const auto names = dist::all_gather_object(this_hostname());
    for (int other = 0; other < world_; ++other) {
      const bool same_node = other / per_node == rank_ / per_node;
      const bool same_name = names[other].toStringRef() == this_hostname();
      expect(same_node == same_name, "rank " + std::to_string(other) + " is on " +
                                         names[other].toStringRef() + ", this rank on " +
                                         this_hostname());
    }
  }

  void local_group(int node, int per_node) {
    dist::init_local_group(node, per_node);
    expect(dist::get_local_rank() == env_int("LOCAL_RANK"), "get_local_rank is not LOCAL_RANK");
    expect(dist::get_local_size() == per_node, "get_local_size is not LOCAL_WORLD_SIZE");
    at::Tensor rank = at::full({1}, rank_, at::kLong);
    dist::all_reduce(rank, "sum", dist::get_local_group());
    const int64_t first = int64_t{node} * per_node;
    expect(rank.item<int64_t>() == per_node * first + per_node * (per_node - 1) / 2,
           "the local group's sum is not its node's ranks' sum");
  }

  void node_shared(const dist::GroupPtr& group, bool shared, const std::string& name) {
    at::Tensor buffer = dist::zeros_node_shared(1000, at::kFloat, group);
    expect(dist::is_node_shared(buffer) == shared,
           "zeros_node_shared on the " + name + (shared ? " is not" : " is") + " shared memory");
    buffer.fill_(float(rank_ + 1));
    dist::all_reduce(buffer, "sum", group);
    const int size = dist::get_world_size(group);
    const int first = rank_ - dist::get_rank(group);
    const float sum = float(size) * float(first + 1) + float(size * (size - 1) / 2);
    expect(buffer.eq(sum).all().item<bool>(),
           "the node-shared all_reduce on the " + name + " is not the sum of its ranks'");
  }

  // 256 KiB blocks: past the size from which one machine's gloo ranks stage.
  void large_calls(const dist::GroupPtr& group, const std::string& name) {
    const int size = dist::get_world_size(group);
    const int64_t block = int64_t{1} << 16;
    const at::Tensor input = at::arange(size * block, at::kFloat).add_(rank_);
    at::Tensor output = at::empty({block}, at::kFloat);
    dist::reduce_scatter_tensor(output, input, "sum", group);
    const int first = rank_ - dist::get_rank(group);
    // Block i of the sum over the group's ranks of arange + rank.
    auto sum_of_block = [&](int i) {
      return at::arange(size * block, at::kFloat)
          .narrow(0, i * block, block)
          .mul_(size)
          .add_(float(size) * first + size * (size - 1) / 2);
    };
    expect(output.equal(sum_of_block(dist::get_rank(group))),
           "reduce_scatter on the " + name + " is not exact");
    const std::vector<at::Tensor> gathered = dist::all_gather(output, group);
    for (int i = 0; i < size; ++i) {
      expect(gathered[i].equal(sum_of_block(i)), "all_gather on the " + name + " is not exact");
    }
  }

 private:
  int rank_;
  int world_;
  bool passed_ = true;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: machine_probe_main BACKEND [LAUNCHER]\n";
    return 2;
  }
  dist::init_dist(argc == 3 ? argv[2] : "pytorch", argv[1]);
  const int per_node = env_int("LOCAL_WORLD_SIZE");
  const int node = env_int("GROUP_RANK");
  Probe probe;
  probe.hostnames(per_node);
  probe.local_group(node, per_node);
  const bool one_machine = per_node == dist::get_world_size();
  probe.node_shared(dist::get_local_group(), /*shared=*/per_node > 1, "local group");
  probe.node_shared(nullptr, /*shared=*/one_machine, "world");
  probe.large_calls(dist::get_local_group(), "local group");
  probe.large_calls(nullptr, "world");
  const bool passed = all_ranks_passed(probe.passed());
  if (dist::get_rank() == 0) std::cout << (passed ? "every rank passed\n" : "a rank failed\n");
  return passed ? 0 : 1;
}
