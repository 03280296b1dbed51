#include "engine/checkpoint/all_ranks.h"

#include "engine/checkpoint/file.h"
#include "engine/dist/errors.h"
#include "engine/dist/helpers.h"
#include "engine/dist/info.h"

namespace engine::checkpoint {

void throw_if_any_rank_failed(const std::string& failure, const std::string& what) {
  const std::string failures = dist::failures_of_ranks(failure, what);
  if (!failures.empty()) throw CheckpointError(dist::on_rank(dist::get_rank(), failures));
}

void where_for_all(bool runs, const std::function<void()>& step, const std::string& what) {
  throw_if_any_rank_failed(runs ? dist::failure_of(step) : "", what);
}

void on_first_rank_for_all(const std::function<void()>& write, const std::string& what) {
  where_for_all(dist::get_rank() == 0, write, what);
}

}  // namespace engine::checkpoint
