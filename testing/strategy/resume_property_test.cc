// A run killed after a checkpoint and resumed ends bit-identical to one that
// never stopped: parameters, buffers and each rank's next random draw, under
// DDPStrategy (one checkpoint file) and FSDPStrategy (sharded checkpoints).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "testing/harness.h"
#include "testing/property.h"
#include "testing/strategy/resume_cases.h"

namespace {

using resume_cases::Case;
using resume_cases::Outcome;

std::string work_dir(const std::string& name) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "resume" / name;
  harness::once_for_all_processes([&] { std::filesystem::remove_all(dir); });
  return dir.string();
}

// In processes the process-wide default generator is each rank's own: the
// runs draw from it too, and it must come back as well.
HARNESS_PROP(ResumeProperty, AStoppedAndResumedRunEndsBitIdenticalToAnUninterruptedOne, ()) {
  const std::string strategy =
      *rc::gen::element<std::string>("DDPStrategy", "FSDPStrategy", "ZeroStrategy");
  Case c =
      *resume_cases::resume_case(*rc::gen::inRange(1, harness::max_world_size(4) + 1), strategy);
  c.process_generator = harness::process_mode();
  RC_TAG(c.strategy, c.zero_stage, c.world_size);
  const auto straight_dir = work_dir("straight");
  const auto stopped_dir = work_dir("stopped");
  const auto straight = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, straight_dir, std::nullopt);
  });
  try {
    harness::run_ranks(c.world_size, [&](int) {
      resume_cases::train(c, c.stop_at, c.stop_at + 1, stopped_dir, std::nullopt);
    });
    RC_FAIL("the stopped run was not killed");
  } catch (const std::runtime_error& error) {  // in processes it arrives as the message
    RC_ASSERT(std::string(error.what()).find(resume_cases::kKilled) != std::string::npos);
  }
  const auto resumed = harness::collect_ranks<Outcome>(c.world_size, [&](int) {
    return resume_cases::train(c, 0, std::nullopt, stopped_dir, std::string("auto"));
  });
  for (int rank = 0; rank < c.world_size; ++rank) {
    for (const auto& entry : straight[rank].state) {
      RC_ASSERT(at::equal(entry.second, resumed[rank].state.at(entry.first)));
      RC_ASSERT(at::equal(entry.second, straight[0].state.at(entry.first)));
    }
    RC_ASSERT(at::equal(straight[rank].next_draw, resumed[rank].next_draw));
  }
}

}  // namespace
