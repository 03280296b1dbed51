// What a rank of a job over several machines sees of them, checked on each
// rank of a job that engine-launch starts on every emulated host
// (emulated_hosts.sh), nproc_per_node ranks a host:
//   - its node's ranks share its hostname and GROUP_RANK, and no other
//     node's do; the nodes are numbered in the order of their lowest rank,
//     and LOCAL_WORLD_SIZE and LOCAL_RANK count each node's ranks (even or
//     uneven nodes: the rest below runs on even nodes only);
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
#include <map>
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

  // Every rank's hostname and torchrun variables: ranks share GROUP_RANK
  // exactly when they share a hostname, the nodes are numbered in the order
  // of their lowest rank, and LOCAL_WORLD_SIZE and LOCAL_RANK count each
  // node's ranks in rank order. Returns whether the nodes are even: as many
  // ranks each, in one run of ranks (what init_local_group takes).
  bool nodes() {
    const auto all = dist::all_gather_object(c10::ivalue::Tuple::create(
        {this_hostname(), int64_t{env_int("GROUP_RANK")}, int64_t{env_int("LOCAL_WORLD_SIZE")},
         int64_t{env_int("LOCAL_RANK")}}));
    std::vector<std::string> names;  // by node, in the order of their lowest rank
    std::map<std::string, std::vector<int>> ranks_of;
    for (int other = 0; other < world_; ++other) {
      const std::string name = all[other].toTupleRef().elements()[0].toStringRef();
      if (ranks_of.count(name) == 0) names.push_back(name);
      ranks_of[name].push_back(other);
    }
    bool even = true;
    for (size_t node = 0; node < names.size(); ++node) {
      const std::vector<int>& ranks = ranks_of[names[node]];
      even = even && ranks.size() == ranks_of[names[0]].size() &&
             ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
      for (size_t local = 0; local < ranks.size(); ++local) {
        const auto& seen = all[ranks[local]].toTupleRef().elements();
        const std::string who = "rank " + std::to_string(ranks[local]) + " on " + names[node];
        expect(seen[1].toInt() == static_cast<int64_t>(node),
               who + " has GROUP_RANK " + std::to_string(seen[1].toInt()) + ", its node is " +
                   std::to_string(node));
        expect(seen[2].toInt() == static_cast<int64_t>(ranks.size()),
               who + " has LOCAL_WORLD_SIZE " + std::to_string(seen[2].toInt()) + ", its node " +
                   std::to_string(ranks.size()) + " ranks");
        expect(seen[3].toInt() == static_cast<int64_t>(local),
               who + " has LOCAL_RANK " + std::to_string(seen[3].toInt()) + ", not " +
                   std::to_string(local));
      }
    }
    if (rank_ == 0) {
      std::cout << names.size() << " nodes, " << (even ? "even" : "uneven") << "\n";
    }
    return even;
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
  Probe probe;
  const bool even = probe.nodes();
  const int per_node = env_int("LOCAL_WORLD_SIZE");
  if (even) {  // init_local_group takes even nodes only, as mmengine's
    probe.local_group(env_int("GROUP_RANK"), per_node);
    probe.node_shared(dist::get_local_group(), /*shared=*/per_node > 1, "local group");
    probe.large_calls(dist::get_local_group(), "local group");
  }
  probe.node_shared(nullptr, /*shared=*/per_node == dist::get_world_size(), "world");
  probe.large_calls(nullptr, "world");
  const bool passed = all_ranks_passed(probe.passed());
  if (dist::get_rank() == 0) std::cout << (passed ? "every rank passed\n" : "a rank failed\n");
  return passed ? 0 : 1;
}
