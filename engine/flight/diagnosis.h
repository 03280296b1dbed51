#pragma once

#include <string>
#include <vector>

#include "engine/flight/record.h"

namespace engine::flight {

// Reads the flight records of the ranks (any order, some may be missing) and
// says, one finding a line: which ranks sent no record; where each rank is
// (the oldest call it has not finished, else its last call), for example
// "rank 3 is in all_reduce #812 (group [0-3], 4 MiB Float[1048576], sum)
// while ranks 0-2 are in broadcast #813 (...)"; the first call number at which
// ranks of a group issued different collectives; and the errors the ranks got.
std::string diagnose(const std::vector<Record>& records);

}  // namespace engine::flight
