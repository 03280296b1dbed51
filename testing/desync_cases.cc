#include "testing/desync_cases.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/ones.h>

#include <stdexcept>

#include "engine/dist/dist.h"

namespace desync_cases {
namespace {

namespace dist = engine::dist;

at::Tensor payload() { return at::ones({256}); }

}  // namespace

Desync parse(const std::string& text) {
  if (text == "skip") return Desync::kSkip;
  if (text == "different_call") return Desync::kDifferentCall;
  throw std::invalid_argument("desync must be skip or different_call, got " + text);
}

const char* name(Desync desync) { return desync == Desync::kSkip ? "skip" : "different_call"; }

void plant(Desync desync, int odd_rank) {
  at::Tensor t = payload();
  dist::all_reduce(t);
  try {
    if (dist::get_rank() != odd_rank) {
      dist::broadcast(t, 0);
    } else if (desync == Desync::kDifferentCall) {
      dist::all_gather(t);
    }
    dist::all_reduce(t);
  } catch (const dist::CollectiveMismatch&) {
    return;
  }
  throw std::logic_error(std::string("the planted desync (") + name(desync) + ") went unnoticed");
}

std::optional<std::string> check_diagnosis(Desync desync, int odd_rank, int world_size,
                                           const std::string& diagnosis) {
  const std::string group = "group [0-" + std::to_string(world_size - 1) + "]";
  const std::string odd = "rank " + std::to_string(odd_rank) + " issued ";
  const std::string odd_call = desync == Desync::kSkip
                                   ? "all_reduce #2 (" + group +
                                         ", 1 KiB "
                                         "Float[256], sum)"
                                   : "all_gather #2 (" + group + ", 1 KiB Float[256])";
  const std::string others_call = "broadcast #2 (" + group + ", root 0, 1 KiB Float[256])";
  for (const std::string& part :
       {"flight records of " + std::to_string(world_size) + " of " + std::to_string(world_size),
        "first divergence on " + group + " at call #2", odd + odd_call, " issued " + others_call}) {
    if (diagnosis.find(part) == std::string::npos) {
      return "the diagnosis lacks \"" + part + "\":\n" + diagnosis;
    }
  }
  return std::nullopt;
}

}  // namespace desync_cases
