#pragma once

#include <string>
#include <vector>

namespace engine::dist {

// Expands a Slurm host list, natively (mmengine shells out to `scontrol`):
// entries separated by commas or spaces; each a name with bracketed numeric
// ranges, zero padding kept ("node[01-03,07]" -> node01 node02 node03
// node07); several bracket groups multiply ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1
// r2n2). Throws InvalidArgument naming `variable` and what is malformed.
std::vector<std::string> expand_hostlist(const std::string& list,
                                         const std::string& variable = "SLURM_NODELIST");

// Expands Slurm's task counts per node: "4(x2),1" -> {4, 4, 1}.
std::vector<int> expand_tasks_per_node(const std::string& counts,
                                       const std::string& variable = "SLURM_TASKS_PER_NODE");

}  // namespace engine::dist
