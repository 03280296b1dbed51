#include "engine/dist/reduce_op.h"

#include <algorithm>
#include <cctype>
#include <map>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

const std::map<std::string, ReduceSpec>& known_ops() {
  static const std::map<std::string, ReduceSpec> ops = {
      {"sum", {ReduceOp::kSum, false}},         {"mean", {ReduceOp::kSum, true}},
      {"product", {ReduceOp::kProduct, false}}, {"min", {ReduceOp::kMin, false}},
      {"max", {ReduceOp::kMax, false}},         {"band", {ReduceOp::kBand, false}},
      {"bor", {ReduceOp::kBor, false}},         {"bxor", {ReduceOp::kBxor, false}},
  };
  return ops;
}

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

}  // namespace

ReduceSpec parse_reduce_op(const std::string& name, c10::ScalarType dtype, int rank) {
  const auto it = known_ops().find(lower(name));
  if (it == known_ops().end()) {
    throw InvalidArgument(on_rank(rank, "unknown reduce op '" + name +
                                            "': use one of sum, mean, product, min, max, "
                                            "band, bor, bxor (case-insensitive)"));
  }
  const ReduceSpec spec = it->second;
  if (is_bitwise(spec.op) && c10::isFloatingType(dtype)) {
    throw InvalidArgument(on_rank(rank, "reduce op '" + name +
                                            "' needs an integer or bool tensor, got " +
                                            c10::toString(dtype) + ": use sum/min/max instead"));
  }
  if (spec.mean && dtype == c10::ScalarType::Bool) {
    throw InvalidArgument(on_rank(
        rank, "reduce op 'mean' is undefined for bool tensors: convert to a number dtype first"));
  }
  return spec;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kBand:
      return "band";
    case ReduceOp::kBor:
      return "bor";
    case ReduceOp::kBxor:
      return "bxor";
  }
  return "?";
}

}  // namespace engine::dist
