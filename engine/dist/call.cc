#include "engine/dist/call.h"

#include <cstring>

#include "engine/dist/describe.h"

namespace engine::dist {

const at::Tensor& no_tensor() {
  static const at::Tensor none;
  return none;
}

CallSignature CallSignature::of(const Call& call, uint64_t seq) {
  CallSignature out;
  out.kind = call.kind;
  out.seq = seq;
  if (call.like->defined()) {
    out.dtype = call.like->scalar_type();
    out.shape = call.like->sizes().vec();
  }
  out.op = call.op;
  out.root = call.root;
  out.peer = call.peer;
  return out;
}

std::string CallSignature::describe() const {
  std::string out = std::string(kind) + " #" + std::to_string(seq) + " (";
  if (peer >= 0)
    out += (std::strcmp(kind, "send") == 0 ? "to " : "from ") + std::to_string(peer) + ", ";
  if (op) out += std::string(reduce_op_name(*op)) + ", ";
  if (root >= 0) out += "root " + std::to_string(root) + ", ";
  if (!ranks.empty()) out += "ranks " + describe_ranks(ranks) + ", ";
  if (dtype != c10::ScalarType::Undefined)
    out += std::string(c10::toString(dtype)) + dist::describe(shape);
  if (out.back() == ' ') out.resize(out.size() - 2);
  return out + ")";
}

bool CallSignature::same_call(const CallSignature& other) const {
  return std::strcmp(kind, other.kind) == 0 && seq == other.seq && dtype == other.dtype &&
         shape == other.shape && op == other.op && root == other.root && ranks == other.ranks;
}

int64_t CallSignature::payload_bytes() const {
  if (dtype == c10::ScalarType::Undefined) return 0;
  int64_t elements = 1;
  for (const int64_t d : shape) elements *= d;
  return elements * static_cast<int64_t>(c10::elementSize(dtype));
}

}  // namespace engine::dist
