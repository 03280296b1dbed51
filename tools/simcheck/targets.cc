#include "tools/simcheck/targets.h"

#include <ATen/core/Tensor.h>
#include <rapidcheck.h>

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "engine/registry/config.h"
#include "examples/demo.h"
#include "testing/model/ddp_cases.h"
#include "testing/strategy/resume_cases.h"

namespace simcheck {
namespace {

std::string digest(const at::Tensor& t) {
  const at::Tensor bytes = t.contiguous().view({-1}).view(at::kByte);
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the exact bits
  const auto* data = bytes.data_ptr<uint8_t>();
  for (int64_t i = 0; i < bytes.numel(); ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return std::to_string(hash);
}

engine::registry::Json demo_config() {
  return engine::registry::read_config_file("examples/train_config.json");
}

Target demo(int64_t iters, const std::string& work_dir, bool resume) {
  auto config = std::make_shared<engine::registry::Json>(demo_config());
  return [config, iters, work_dir, resume](int) {
    examples::DemoOverrides overrides;
    overrides.launcher = "none";
    overrides.shares_process = true;
    overrides.quiet = true;
    overrides.max_iters = iters;
    overrides.checkpoint_interval = std::max<int64_t>(1, iters / 3);
    overrides.work_dir = work_dir;
    if (resume) overrides.resume_from = "auto";
    const auto result = examples::run_demo(*config, overrides);
    std::ostringstream out;
    out.precision(17);
    for (const auto& [name, value] : result.metrics) out << name << "=" << value << " ";
    return out.str();
  };
}

Target ddp(uint64_t seed, int world_size) {
  const auto c = std::make_shared<ddp_cases::TrainingCase>(
      ddp_cases::training_case(world_size)(rc::Random(seed)).value());
  auto initial = ddp_cases::initial_net(*c);
  return [c, initial](int rank) {
    std::string out;
    for (const auto& step : ddp_cases::train_rank(*c, *initial, rank)) {
      for (const auto& [name, value] : step) out += name + ":" + digest(value) + " ";
    }
    return out;
  };
}

// The exact-resume property's training (testing/strategy/resume_cases.h)
// under `strategy_type`: a case drawn from `seed`, checkpoints every
// c.stop_at iterations and snapshots every 1-3, half of them written in the
// background (from the seed); resumed from the newest of them, so a crash in
// the middle of a snapshot's collectives must leave the previous snapshot
// whole.
Target strategy(uint64_t seed, int world_size, const std::string& work_dir, bool resume,
                const std::string& strategy_type) {
  const auto c = std::make_shared<resume_cases::Case>(
      resume_cases::resume_case(world_size, strategy_type)(rc::Random(seed)).value());
  const resume_cases::Snapshotting snapshots{static_cast<int64_t>(1 + seed % 3),
                                             work_dir + "/snapshots", std::nullopt, 1,
                                             seed / 3 % 2 == 1};
  return [c, work_dir, resume, snapshots](int) {
    const auto resume_from = resume ? std::optional<std::string>("auto") : std::nullopt;
    const auto outcome =
        resume_cases::train(*c, c->stop_at, std::nullopt, work_dir, resume_from, snapshots);
    std::string out = "next_draw:" + digest(outcome.next_draw) + " ";
    for (const auto& [name, value] : outcome.state) out += name + ":" + digest(value) + " ";
    return out;
  };
}

}  // namespace

const std::vector<std::string>& target_names() {
  static const std::vector<std::string> names{"demo", "ddp", "strategy", "fsdp", "zero"};
  return names;
}

Target make_target(const std::string& name, uint64_t seed, int world_size, int64_t iters,
                   const std::string& work_dir, bool resume) {
  if (name == "demo") return demo(iters, work_dir, resume);
  if (name == "ddp") return ddp(seed, world_size);
  if (name == "strategy") return strategy(seed, world_size, work_dir, resume, "DDPStrategy");
  if (name == "fsdp") return strategy(seed, world_size, work_dir, resume, "FSDPStrategy");
  if (name == "zero") return strategy(seed, world_size, work_dir, resume, "ZeroStrategy");
  throw std::invalid_argument("simcheck: unknown target " + name +
                              " (demo, ddp, strategy, fsdp or zero)");
}

}  // namespace simcheck
