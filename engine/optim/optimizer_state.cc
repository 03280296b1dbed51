#include "engine/optim/optimizer_state.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/scalar_tensor.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/optim/zero_redundancy_optimizer.h"

namespace engine::optim {
namespace {

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// LibTorch's archives go through TorchScript's serializer, whose type caches
// are not safe for concurrent use by ranks sharing a process.
std::mutex& archive_mutex() {
  static std::mutex mutex;
  return mutex;
}

// What `written` holds, serialized and read back: LibTorch shows an
// archive's values only through an InputArchive.
InputArchive read_back(OutputArchive& written) {
  std::vector<char> bytes;
  written.save_to([&](const void* data, size_t size) {
    const auto* begin = static_cast<const char*>(data);
    bytes.insert(bytes.end(), begin, begin + size);
    return size;
  });
  InputArchive read;
  read.load_from(bytes.data(), bytes.size());
  return read;
}

// Every value of an archive that holds only values (no nested archives).
ValueDict values_of(InputArchive& archive) {
  ValueDict out = empty_value_dict();
  for (const std::string& key : archive.keys()) {
    c10::IValue value;
    archive.read(key, value);
    out.insert(key, value);
  }
  return out;
}

void write_values(OutputArchive& archive, const ValueDict& values) {
  for (const auto& item : values) archive.write(item.key().toStringRef(), item.value());
}

int64_t read_count(InputArchive& archive, const std::string& key) {
  at::Tensor count;
  archive.read(key, count);
  return count.item<int64_t>();
}

// LibTorch's layout (torch/optim/serialize.h): "state" holds one archive per
// parameter key, "param_groups" lists each group's parameter keys (their
// order is what maps states to parameters) and options.
OptimizerState parse(InputArchive& archive) {
  InputArchive states;
  archive.read("state", states);
  InputArchive groups;
  archive.read("param_groups", groups);
  OptimizerState out;
  const int64_t group_count = read_count(groups, "param_groups/size");
  for (int64_t g = 0; g < group_count; ++g) {
    InputArchive group;
    groups.read("param_groups/" + std::to_string(g), group);
    const int64_t size = read_count(group, "params/size");
    for (int64_t i = 0; i < size; ++i) {
      c10::IValue key;
      group.read("params/" + std::to_string(i), key);
      InputArchive state;
      out.params.push_back(states.try_read(key.toStringRef(), state) ? values_of(state)
                                                                     : empty_value_dict());
    }
    InputArchive options;
    group.read("options", options);
    out.group_options.push_back(values_of(options));
    out.group_sizes.push_back(size);
  }
  return out;
}

// The key of the i-th parameter in a built archive. LibTorch names a
// parameter by its TensorImpl's address, and from 2.x its load() parses each
// key back into one (std::stoull): keys are decimal numbers, never 0.
std::string parameter_key(size_t i) { return std::to_string(i + 1); }

void build(OutputArchive& archive, const OptimizerState& state) {
  const auto unit = archive.compilation_unit();
  archive.write("pytorch_version", c10::IValue("1.5.0"));
  OutputArchive states(unit);
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (state.params[i].empty()) continue;
    OutputArchive param(unit);
    write_values(param, state.params[i]);
    states.write(parameter_key(i), param);
  }
  archive.write("state", states);
  OutputArchive groups(unit);
  groups.write("param_groups/size",
               at::scalar_tensor(static_cast<int64_t>(state.group_sizes.size()), at::kLong));
  size_t next = 0;
  for (size_t g = 0; g < state.group_sizes.size(); ++g) {
    OutputArchive group(unit);
    group.write("params/size", at::scalar_tensor(state.group_sizes[g], at::kLong));
    for (int64_t i = 0; i < state.group_sizes[g]; ++i) {
      group.write("params/" + std::to_string(i), c10::IValue(parameter_key(next++)));
    }
    OutputArchive options(unit);
    write_values(options, state.group_options[g]);
    group.write("options", options);
    groups.write("param_groups/" + std::to_string(g), group);
  }
  archive.write("param_groups", groups);
}

void check_fits(const torch::optim::Optimizer& optimizer, const OptimizerState& state) {
  const auto& groups = optimizer.param_groups();
  bool fits = groups.size() == state.group_sizes.size();
  for (size_t g = 0; fits && g < groups.size(); ++g) {
    fits = static_cast<int64_t>(groups[g].params().size()) == state.group_sizes[g];
  }
  if (fits) return;
  std::string have, saved;
  for (const auto& group : groups) have += " " + std::to_string(group.params().size());
  for (const int64_t size : state.group_sizes) saved += " " + std::to_string(size);
  throw dist::InvalidArgument(dist::on_rank(
      dist::get_rank(), "optimizer state for param groups of sizes [" + saved +
                            " ] does not fit an optimizer whose groups have [" + have +
                            " ] parameters; build the optimizer over the same parameters"));
}

// LibTorch's load() restores states only; PyTorch's load_state_dict also
// restores each group's options (the learning rate a scheduler set).
void load_group_options(torch::optim::Optimizer& optimizer, const OptimizerState& state) {
  for (size_t g = 0; g < state.group_options.size(); ++g) {
    OutputArchive written;
    write_values(written, state.group_options[g]);
    InputArchive read = read_back(written);
    optimizer.param_groups()[g].options().serialize(read);
  }
}

// Reads the layout of to_state_dict, failing with InvalidArgument that
// names the state's source.
struct StateDictReader {
  const std::string& what;

  void expect(bool holds, const std::string& rule) const {
    if (!holds) throw dist::InvalidArgument(what + " is not an optimizer state_dict: " + rule);
  }

  c10::impl::GenericDict dict(const c10::IValue& value, const std::string& of) const {
    expect(value.isGenericDict(), of + " must be a dict");
    return value.toGenericDict();
  }

  c10::ArrayRef<c10::IValue> list(const c10::IValue& value, const std::string& of) const {
    expect(value.isList(), of + " must be a list");
    return value.toListRef();
  }

  c10::IValue entry(const c10::impl::GenericDict& dict, const std::string& key) const {
    const auto found = dict.find(key);
    expect(found != dict.end(), "it has no \"" + key + "\"");
    return found->value();
  }

  // A dict whose keys are strings, as a ValueDict.
  ValueDict named_values(const c10::IValue& value, const std::string& of) const {
    ValueDict out = empty_value_dict();
    for (const auto& item : dict(value, of)) {
      expect(item.key().isString(), of + "'s keys must be strings");
      out.insert(item.key().toStringRef(), item.value());
    }
    return out;
  }
};

// The key of `param`'s state in optimizer.state(): its TensorImpl's address,
// as a string in LibTorch 1.13 and as the pointer from 2.x.
template <typename Key>
Key state_key(const at::Tensor& param) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream address;  // as c10::guts::to_string writes it
    address << static_cast<const void*>(param.unsafeGetTensorImpl());
    return address.str();
  } else {
    return param.unsafeGetTensorImpl();
  }
}

// A parameter's state as the archive gives it back: the values its
// serialize() writes, in that order, without undefined tensors, every tensor
// copied. std::nullopt for a state of a type not listed here.
std::optional<ValueDict> values_read_directly(const torch::optim::OptimizerParamState& state) {
  ValueDict out = empty_value_dict();
  const auto add = [&](const char* name, const c10::IValue& value) {
    if (!value.isTensor()) {
      out.insert(name, value);
    } else if (value.toTensor().defined()) {
      out.insert(name, value.toTensor().detach().clone());
    }
  };
  const auto adam_like = [&](const auto& adam) {
    add("step", adam.step());
    add("exp_avg", adam.exp_avg());
    add("exp_avg_sq", adam.exp_avg_sq());
    add("max_exp_avg_sq", adam.max_exp_avg_sq());
  };
  if (const auto* sgd = dynamic_cast<const torch::optim::SGDParamState*>(&state)) {
    add("momentum_buffer", sgd->momentum_buffer());
  } else if (const auto* adam = dynamic_cast<const torch::optim::AdamParamState*>(&state)) {
    adam_like(*adam);
  } else if (const auto* adamw = dynamic_cast<const torch::optim::AdamWParamState*>(&state)) {
    adam_like(*adamw);
  } else if (const auto* adagrad = dynamic_cast<const torch::optim::AdagradParamState*>(&state)) {
    add("step", adagrad->step());
    add("sum", adagrad->sum());
  } else if (const auto* rmsprop = dynamic_cast<const torch::optim::RMSpropParamState*>(&state)) {
    add("step", rmsprop->step());
    add("square_avg", rmsprop->square_avg());
    add("momentum_buffer", rmsprop->momentum_buffer());
    add("grad_avg", rmsprop->grad_avg());
  } else {
    return std::nullopt;
  }
  return out;
}

ValueDict options_values(const torch::optim::OptimizerOptions& options) {
  std::lock_guard<std::mutex> lock(archive_mutex());
  OutputArchive written;
  options.serialize(written);
  InputArchive read = read_back(written);
  return values_of(read);
}

// optimizer_state without serializing the states: std::nullopt when a state
// is of a type values_read_directly does not know.
std::optional<OptimizerState> state_read_directly(const torch::optim::Optimizer& optimizer) {
  const auto& states = optimizer.state();
  using Key = typename std::decay_t<decltype(states)>::key_type;
  OptimizerState out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& param : group.params()) {
      const auto found = states.find(state_key<Key>(param));
      if (found == states.end()) {
        out.params.push_back(empty_value_dict());
        continue;
      }
      std::optional<ValueDict> values = values_read_directly(*found->second);
      if (!values) return std::nullopt;
      out.params.push_back(std::move(*values));
    }
    out.group_options.push_back(options_values(group.options()));
    out.group_sizes.push_back(static_cast<int64_t>(group.params().size()));
  }
  return out;
}

}  // namespace

ValueDict empty_value_dict() { return ValueDict(c10::StringType::get(), c10::AnyType::get()); }

OptimizerState optimizer_state(const torch::optim::Optimizer& optimizer) {
  if (const auto* zero = dynamic_cast<const ZeroRedundancyOptimizer*>(&optimizer)) {
    return zero->state();
  }
  if (std::optional<OptimizerState> state = state_read_directly(optimizer)) return *state;
  return optimizer_state_through_archive(optimizer);
}

OptimizerState optimizer_state_through_archive(const torch::optim::Optimizer& optimizer) {
  std::lock_guard<std::mutex> lock(archive_mutex());
  OutputArchive written;
  optimizer.save(written);
  InputArchive read = read_back(written);
  return parse(read);
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const OptimizerState& state) {
  check_fits(optimizer, state);
  if (auto* zero = dynamic_cast<ZeroRedundancyOptimizer*>(&optimizer))
    return zero->load_state(state);
  std::lock_guard<std::mutex> lock(archive_mutex());
  OutputArchive written;
  build(written, state);
  InputArchive read = read_back(written);
  try {
    optimizer.load(read);
    load_group_options(optimizer, state);
  } catch (const c10::Error& error) {
    throw dist::InvalidArgument(
        dist::on_rank(dist::get_rank(),
                      "optimizer state that this optimizer cannot take (a value of the "
                      "wrong type, or a missing one; was it saved by another optimizer?): " +
                          std::string(error.what_without_backtrace())));
  }
}

c10::IValue to_state_dict(const OptimizerState& state) {
  c10::impl::GenericDict states(c10::IntType::get(), c10::AnyType::get());
  for (size_t i = 0; i < state.params.size(); ++i) {
    if (!state.params[i].empty()) states.insert(static_cast<int64_t>(i), state.params[i]);
  }
  c10::impl::GenericList groups(c10::AnyType::get());
  int64_t next = 0;
  for (size_t g = 0; g < state.group_sizes.size(); ++g) {
    ValueDict group = state.group_options[g].copy();
    // A list of Any, not of int: the pickler writes int lists through
    // torch.jit._pickle.build_intlist, a global torch.load(weights_only=True)
    // refuses.
    c10::impl::GenericList indices(c10::AnyType::get());
    for (int64_t i = 0; i < state.group_sizes[g]; ++i) indices.push_back(next++);
    group.insert("params", indices);
    groups.push_back(group);
  }
  ValueDict out = empty_value_dict();
  out.insert("state", states);
  out.insert("param_groups", groups);
  return out;
}

OptimizerState from_state_dict(const c10::IValue& value, const std::string& what) {
  const StateDictReader reader{what};
  const c10::impl::GenericDict top = reader.dict(value, "the optimizer state");
  OptimizerState out;
  const c10::IValue groups = reader.entry(top, "param_groups");
  for (const c10::IValue& group : reader.list(groups, "param_groups")) {
    ValueDict options = reader.named_values(group, "a param group");
    const c10::IValue indices = reader.entry(options, "params");
    static_cast<void>(options.erase("params"));
    int64_t size = 0;
    for (const c10::IValue& index : reader.list(indices, "a param group's params")) {
      reader.expect(index.isInt() && index.toInt() == static_cast<int64_t>(out.params.size()),
                    "param group indices must count 0, 1, 2, ... across the groups in order");
      out.params.push_back(empty_value_dict());
      ++size;
    }
    out.group_options.push_back(std::move(options));
    out.group_sizes.push_back(size);
  }
  const c10::impl::GenericDict states = reader.dict(reader.entry(top, "state"), "state");
  for (const auto& entry : states) {
    const c10::IValue& index = entry.key();
    reader.expect(index.isInt() && index.toInt() >= 0 &&
                      index.toInt() < static_cast<int64_t>(out.params.size()),
                  "\"state\" is keyed by parameter indices of the param groups");
    out.params[static_cast<size_t>(index.toInt())] =
        reader.named_values(entry.value(), "a parameter's state");
  }
  return out;
}

}  // namespace engine::optim
