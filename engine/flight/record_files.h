#pragma once

#include <string>
#include <vector>

#include "engine/flight/record.h"

namespace engine::flight {

// Reads flight records from files and folders (a folder: every
// flight_rank*.json in it), sorted by rank. Throws InvalidArgument for a file
// that cannot be read or parsed, two records of one rank, or no record at all.
std::vector<Record> read_flight_records(const std::vector<std::string>& paths);

}  // namespace engine::flight
