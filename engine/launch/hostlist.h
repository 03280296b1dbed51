#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace engine::dist {

// More hosts (or per-host task counts) than any cluster has: a list that
// expands past this is an error, not a memory exhaustion.
constexpr size_t kMaxHosts = size_t{1} << 20;

// Expands a Slurm host list, natively (mmengine shells out to `scontrol`):
// entries separated by commas or spaces; each a name with bracketed numeric
// ranges, zero padding kept ("node[01-03,07]" -> node01 node02 node03
// node07); several bracket groups multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1
// r2n2). Throws InvalidArgument naming `variable` and what is malformed,
// or that the list expands to more than kMaxHosts names (checked before they
// are built).
std::vector<std::string> expand_hostlist(const std::string& list,
                                         const std::string& variable = "SLURM_NODELIST");

// Expands Slurm's task counts per node: "4(x2),1" -> {4, 4, 1}; at most
// kMaxHosts counts.
std::vector<int> expand_tasks_per_node(const std::string& counts,
                                       const std::string& variable = "SLURM_TASKS_PER_NODE");

}  // namespace engine::dist
