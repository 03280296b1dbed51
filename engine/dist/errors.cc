#include "engine/dist/errors.h"

namespace engine::dist {

std::string on_rank(int rank, const std::string& what) {
  return "[rank " + std::to_string(rank) + "] " + what;
}

}  // namespace engine::dist
