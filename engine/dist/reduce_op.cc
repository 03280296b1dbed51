#include "engine/dist/reduce_op.h"

#include <strings.h>

#include <cstring>

#include "engine/dist/errors.h"
#include "engine/dist/reduce_kernel.h"

namespace engine::dist {
namespace {

struct NamedOp {
  const char* name;
  ReduceSpec spec;
};

// A table, not a map of lowered names: a call of a few microseconds notices
// a string copy per collective.
constexpr NamedOp kKnownOps[] = {
    {"sum", {ReduceOp::kSum, false}},         {"mean", {ReduceOp::kSum, true}},
    {"product", {ReduceOp::kProduct, false}}, {"min", {ReduceOp::kMin, false}},
    {"max", {ReduceOp::kMax, false}},         {"band", {ReduceOp::kBand, false}},
    {"bor", {ReduceOp::kBor, false}},         {"bxor", {ReduceOp::kBxor, false}},
};

const NamedOp* find_op(const std::string& name) {
  for (const NamedOp& known : kKnownOps) {
    if (name.size() == std::strlen(known.name) &&
        strncasecmp(known.name, name.data(), name.size()) == 0) {
      return &known;
    }
  }
  return nullptr;
}

}  // namespace

ReduceSpec parse_reduce_op(const std::string& name, c10::ScalarType dtype, int rank,
                           const char* call) {
  const auto invalid = [&](const std::string& what) {
    throw InvalidArgument(on_rank(rank, std::string(call) + ": " + what));
  };
  const NamedOp* known = find_op(name);
  if (!known) {
    invalid("unknown reduce op '" + name +
            "': use one of sum, mean, product, min, max, band, bor, bxor (case-insensitive)");
  }
  const ReduceSpec spec = known->spec;
  if (is_bitwise(spec.op) && c10::isFloatingType(dtype)) {
    invalid("reduce op '" + name + "' needs an integer or bool tensor, got " +
            c10::toString(dtype) + ": use sum/min/max instead");
  }
  if (spec.mean && dtype == c10::ScalarType::Bool)
    invalid("reduce op 'mean' is undefined for bool tensors: convert to a number dtype first");
  if (!can_reduce(dtype, spec.op)) {
    invalid(std::string("cannot reduce ") + c10::toString(dtype) + " with " + name +
            ": use a real number, integer or bool dtype");
  }
  return spec;
}

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}

const char* reduce_op_name(ReduceOp op) {
  for (const NamedOp& known : kKnownOps) {
    if (known.spec.op == op && !known.spec.mean) return known.name;
  }
  return "?";
}

}  // namespace engine::dist
