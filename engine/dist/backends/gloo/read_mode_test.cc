#include "engine/dist/backends/gloo/read_mode.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace engine::dist::gloo {
namespace {

// The modes the pairs were put in, in order.
struct Switches {
  std::vector<bool> modes;
  ReadMode::SetSpinning recorder() {
    return [this](bool spin) { modes.push_back(spin); };
  }
};

TEST(ReadModeTest, PairsStartBlocking) {
  Switches switches;
  ReadMode mode(/*may_spin=*/true, switches.recorder());
  EXPECT_EQ(switches.modes, std::vector<bool>({false}));
  mode.refresh();
  EXPECT_FALSE(mode.spinning());
  EXPECT_EQ(switches.modes, std::vector<bool>({false}));
}

TEST(ReadModeTest, SpinsOnlyWhileSomeoneWaits) {
  Switches switches;
  ReadMode mode(/*may_spin=*/true, switches.recorder());
  {
    ReadMode::Waiting first(mode);
    mode.refresh();
    EXPECT_TRUE(mode.spinning());
    std::optional<ReadMode::Waiting> second(std::in_place, mode);
    mode.refresh();
    second.reset();
    mode.refresh();
    EXPECT_TRUE(mode.spinning()) << "one caller still waits";
  }
  mode.refresh();
  EXPECT_FALSE(mode.spinning());
  // Switched once each way: not at every message.
  EXPECT_EQ(switches.modes, std::vector<bool>({false, true, false}));
}

TEST(ReadModeTest, NeverSpinsWithMoreRanksThanCores) {
  Switches switches;
  ReadMode mode(/*may_spin=*/false, switches.recorder());
  ReadMode::Waiting waiting(mode);
  mode.refresh();
  EXPECT_FALSE(mode.spinning());
  EXPECT_EQ(switches.modes, std::vector<bool>({false}));
}

}  // namespace
}  // namespace engine::dist::gloo
