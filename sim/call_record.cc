#include "sim/call_record.h"

#include "engine/dist/describe.h"
#include "engine/dist/reduce_op.h"

namespace sim {

std::string CallRecord::describe() const {
  std::string out = std::string(kind) + " #" + std::to_string(seq) + " (";
  if (peer >= 0)
    out += (std::string(kind) == "send" ? "to " : "from ") + std::to_string(peer) + ", ";
  if (op >= 0)
    out +=
        std::string(engine::dist::reduce_op_name(static_cast<engine::dist::ReduceOp>(op))) + ", ";
  if (root >= 0) out += "root " + std::to_string(root) + ", ";
  if (!ranks.empty()) out += "ranks " + engine::dist::describe_ranks(ranks) + ", ";
  if (dtype != c10::ScalarType::Undefined) {
    out += std::string(c10::toString(dtype)) + engine::dist::describe(shape);
  }
  if (out.back() == ' ') out.resize(out.size() - 2);
  return out + ")";
}

bool CallRecord::same_call(const CallRecord& other) const {
  return std::string(kind) == other.kind && seq == other.seq && dtype == other.dtype &&
         shape == other.shape && root == other.root && op == other.op && ranks == other.ranks;
}

int64_t CallRecord::payload_bytes() const {
  int64_t elements = 1;
  for (const int64_t d : shape) elements *= d;
  return dtype == c10::ScalarType::Undefined ? 0 : elements * c10::elementSize(dtype);
}

}  // namespace sim
