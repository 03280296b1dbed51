#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "engine/data/default_sampler.h"
#include "engine/data/infinite_sampler.h"
#include "engine/dist/dist.h"
#include "testing/cases.h"
#include "testing/harness.h"
#include "testing/property.h"

namespace {

using engine::data::DefaultSampler;
using engine::data::SamplerOptions;

struct RankView {
  std::vector<int64_t> epoch0, epoch1;
  int64_t num_samples = 0;
  std::optional<std::vector<int64_t>> collected;  // rank 0 only
};

std::vector<int64_t> as_ints(const std::vector<c10::IValue>& values) {
  std::vector<int64_t> out;
  for (const auto& value : values) out.push_back(value.toInt());
  return out;
}

// The world and the group the samplers run on: the whole world, or in
// half the cases any subgroup (without rank 0, not contiguous, one rank).
struct Groups {
  int world_size = 1;
  std::vector<int> members;
  bool whole() const { return static_cast<int>(members.size()) == world_size; }
};

rc::Gen<Groups> groups() {
  return rc::gen::exec([] {
    Groups g;
    g.world_size = *rc::gen::inRange(1, 6);
    g.members = *cases::world_or_subgroup(g.world_size);
    return g;
  });
}

// Every member samples epochs 0 and 1 on the group while the other ranks
// run collectives of their own; on the whole world each also hands its
// epoch-0 indices, as results, to collect_results (which takes the world).
// Indexed by group rank.
std::vector<RankView> sample(const Groups& g, int64_t size, const SamplerOptions& options) {
  const auto all = harness::collect_ranks<RankView>(g.world_size, [&](int rank) {
    const auto split = cases::split_world(g.world_size, g.members);
    RankView view;
    if (cases::seat_of(g.members, rank) >= 0) {
      DefaultSampler sampler(size, options, split.members);
      view.epoch0 = sampler.indices();
      view.num_samples = sampler.num_samples();
      sampler.set_epoch(1);
      view.epoch1 = sampler.indices();
      if (g.whole()) {
        std::vector<c10::IValue> part(view.epoch0.begin(), view.epoch0.end());
        auto collected = engine::dist::collect_results(part, size);
        if (collected) view.collected = as_ints(*collected);
      }
    }
    cases::keep_busy(split.others);
    return view;
  });
  std::vector<RankView> views;
  for (const int member : g.members) views.push_back(all[member]);
  return views;
}

// The serial reference: rank r of ws takes positions r, r+ws, ... of `order`
// extended by repeating it from the start up to `total`.
std::vector<int64_t> positions(const std::vector<int64_t>& order, int rank, int world_size,
                               int64_t total) {
  std::vector<int64_t> out;
  for (int64_t p = rank; p < total; p += world_size) out.push_back(order[p % order.size()]);
  return out;
}

HARNESS_PROP(SamplerProperty, WithoutShuffleRanksInterleaveAndCollectRestoresDatasetOrder, ()) {
  const Groups g = *groups();
  const int world_size = static_cast<int>(g.members.size());
  const int64_t size = *rc::gen::inRange<int64_t>(1, 40);
  const bool round_up = *rc::gen::arbitrary<bool>();
  SamplerOptions options;
  options.shuffle = false;
  options.round_up = round_up;
  const auto views = sample(g, size, options);
  std::vector<int64_t> dataset(size);
  std::iota(dataset.begin(), dataset.end(), 0);
  const int64_t per_rank = (size + world_size - 1) / world_size;
  for (int rank = 0; rank < world_size; ++rank) {
    const int64_t total = round_up ? per_rank * world_size : size;
    RC_ASSERT(views[rank].epoch0 == positions(dataset, rank, world_size, total));
    RC_ASSERT(views[rank].num_samples == static_cast<int64_t>(views[rank].epoch0.size()));
    RC_ASSERT(views[rank].epoch1 == views[rank].epoch0);
    if (round_up) RC_ASSERT(views[rank].num_samples == per_rank);
  }
  if (g.whole()) RC_ASSERT(views[0].collected == std::optional<std::vector<int64_t>>(dataset));
}

HARNESS_PROP(SamplerProperty, ShuffledEpochsAreOneSharedPermutationCoveredByTheRanks, ()) {
  const Groups g = *groups();
  const int world_size = static_cast<int>(g.members.size());
  const int64_t size = *rc::gen::inRange<int64_t>(2, 40);
  SamplerOptions options;  // shuffle, round_up, seed drawn on the group's first rank and shared
  const auto views = sample(g, size, options);
  // Rebuild each epoch's permutation from the interleaved rank parts: it must
  // be a permutation (so every rank used the same one), padded from its start.
  std::vector<std::vector<int64_t>> permutations;
  for (auto epoch : {&RankView::epoch0, &RankView::epoch1}) {
    std::vector<int64_t> order;
    const int64_t per_rank = (size + world_size - 1) / world_size;
    for (int64_t i = 0; i < per_rank; ++i) {
      for (int rank = 0; rank < world_size; ++rank) order.push_back((views[rank].*epoch)[i]);
    }
    std::vector<int64_t> permutation(order.begin(), order.begin() + size);
    std::vector<int64_t> sorted = permutation;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < size; ++i) RC_ASSERT(sorted[i] == i);
    // Padding wraps around, more than once when ranks outnumber the samples.
    for (size_t i = size; i < order.size(); ++i) RC_ASSERT(order[i] == permutation[i % size]);
    permutations.push_back(permutation);
  }
  if (g.whole()) RC_ASSERT(*views[0].collected == permutations[0]);
  // Reshuffled per epoch: two equal permutations of 20 or more elements would
  // take odds below 1e-18; smaller ones may legitimately repeat.
  if (size >= 20) RC_ASSERT(permutations[0] != permutations[1]);
}

// The endless sequence rebuilt from the ranks' parts: global position
// rank + i * world_size holds parts[rank][i].
std::vector<int64_t> interleaved(const std::vector<std::vector<int64_t>>& parts) {
  std::vector<int64_t> sequence;
  for (size_t i = 0; i < parts[0].size(); ++i) {
    for (const auto& part : parts) sequence.push_back(part[i]);
  }
  return sequence;
}

HARNESS_PROP(SamplerProperty, InfiniteSamplerRanksShareOneSequenceOfPasses, ()) {
  const Groups g = *groups();
  const int world_size = static_cast<int>(g.members.size());
  const int64_t size = *rc::gen::inRange<int64_t>(1, 30);
  const int64_t count = *rc::gen::inRange<int64_t>(0, 3 * size + world_size);
  const int64_t first = *rc::gen::inRange<int64_t>(0, count + 1);
  engine::data::InfiniteSamplerOptions options;  // seed drawn on the group's first rank, shared
  options.shuffle = *rc::gen::arbitrary<bool>();
  const auto all = harness::collect_ranks<std::vector<int64_t>>(g.world_size, [&](int rank) {
    const auto split = cases::split_world(g.world_size, g.members);
    std::vector<int64_t> mine;
    const int seat = cases::seat_of(g.members, rank);
    if (seat >= 0) {
      engine::data::InfiniteSampler sampler(size, options, split.members);
      EXPECT_EQ(sampler.rank(), seat);
      EXPECT_EQ(sampler.world_size(), world_size);
      EXPECT_EQ(sampler.size(), size);
      // Taken one by one and then as a batch: the same stream.
      for (int64_t i = 0; i < first; ++i) mine.push_back(sampler.next());
      const auto rest = sampler.next(count - first);
      mine.insert(mine.end(), rest.begin(), rest.end());
    }
    cases::keep_busy(split.others);
    return mine;
  });
  std::vector<std::vector<int64_t>> parts;
  for (const int member : g.members) parts.push_back(all[member]);
  const std::vector<int64_t> sequence = interleaved(parts);
  std::vector<int64_t> identity(size);
  std::iota(identity.begin(), identity.end(), 0);
  std::vector<std::vector<int64_t>> passes;
  for (size_t start = 0; start + size <= sequence.size(); start += size) {
    std::vector<int64_t> pass(sequence.begin() + start, sequence.begin() + start + size);
    if (!options.shuffle) RC_ASSERT(pass == identity);
    std::vector<int64_t> sorted = pass;
    std::sort(sorted.begin(), sorted.end());
    RC_ASSERT(sorted == identity);
    passes.push_back(pass);
  }
  // A fresh permutation per pass (see the DefaultSampler property for the odds).
  if (options.shuffle && size >= 20 && passes.size() >= 2) RC_ASSERT(passes[0] != passes[1]);
}

// A run stopped after `consumed` positions of the epoch and resumed at
// another world size: the new ranks' parts, interleaved, are the rest of the
// epoch's sequence (as one rank sees it) and then round_up's padding from
// its start; with what was consumed, every sample exactly once.
HARNESS_PROP(SamplerProperty, ResumedAtAnyWorldSizeTheEpochContinuesWhereItStopped, ()) {
  const int64_t size = *rc::gen::inRange<int64_t>(1, 40);
  const int stopped_world = *rc::gen::inRange(1, 6);
  const int resumed_world = *rc::gen::inRange(1, 6);
  const int64_t batch = *rc::gen::inRange<int64_t>(1, 5);
  // Whole iterations of the stopped run that leave some of the epoch.
  const int64_t iterations =
      *rc::gen::inRange<int64_t>(0, (size - 1) / (batch * stopped_world) + 1);
  const int64_t consumed = iterations * batch * stopped_world;
  SamplerOptions options;
  options.shuffle = *rc::gen::arbitrary<bool>();
  options.seed = *rc::gen::inRange<int64_t>(0, 1000);
  const int64_t epoch = *rc::gen::inRange<int64_t>(0, 3);
  RC_TAG(stopped_world, resumed_world);
  DefaultSampler serial(size, options);
  serial.set_epoch(epoch);
  const std::vector<int64_t> sequence = serial.indices();
  const auto parts = harness::collect_ranks<std::vector<int64_t>>(resumed_world, [&](int) {
    DefaultSampler sampler(size, options);
    sampler.set_epoch(epoch);
    return sampler.indices(consumed);
  });
  const std::vector<int64_t> rest = interleaved(parts);
  const int64_t remaining = size - consumed;
  const int64_t padded = (remaining + resumed_world - 1) / resumed_world * resumed_world;
  RC_ASSERT(static_cast<int64_t>(rest.size()) == padded);
  for (int64_t i = 0; i < padded; ++i) {
    RC_ASSERT(rest[i] == sequence[(consumed + i) % size]);
  }
  std::vector<int64_t> seen(sequence.begin(), sequence.begin() + consumed);
  seen.insert(seen.end(), rest.begin(), rest.begin() + remaining);
  std::sort(seen.begin(), seen.end());
  std::vector<int64_t> identity(size);
  std::iota(identity.begin(), identity.end(), 0);
  RC_ASSERT(seen == identity);
}

TEST(SamplerTest, APositionOutsideTheEpochIsRejected) {
  SamplerOptions options;
  options.seed = 7;
  const DefaultSampler sampler(10, options);
  EXPECT_EQ(sampler.indices(9), std::vector<int64_t>{sampler.indices()[9]});
  for (const int64_t consumed : {int64_t{-1}, int64_t{10}, int64_t{11}}) {
    try {
      sampler.indices(consumed);
      ADD_FAILURE() << consumed << " was accepted";
    } catch (const engine::dist::InvalidArgument& error) {
      EXPECT_NE(std::string(error.what()).find("[0, 10)"), std::string::npos) << error.what();
    }
  }
}

TEST(SamplerTest, SamplersOnASubgroupTakeItsRankAndSize) {
  harness::run_ranks(3, [](int rank) {
    auto group = engine::dist::new_group({2, 1});
    if (!group->is_member()) return;
    SamplerOptions options;
    options.shuffle = false;
    options.seed = 3;
    DefaultSampler sampler(5, options, group);
    engine::data::InfiniteSampler endless(5, {false, 3}, group);
    const int group_rank = rank == 1 ? 0 : 1;  // group ranks follow global order
    EXPECT_EQ(sampler.rank(), group_rank);
    EXPECT_EQ(sampler.world_size(), 2);
    EXPECT_EQ(endless.rank(), group_rank);
    EXPECT_EQ(endless.world_size(), 2);
    const std::vector<int64_t> expected =
        group_rank == 0 ? std::vector<int64_t>{0, 2, 4} : std::vector<int64_t>{1, 3, 0};
    EXPECT_EQ(sampler.indices(), expected);
    EXPECT_EQ(endless.next(3), expected);
  });
}

TEST(SamplerTest, TheSameSeedGivesTheSameOrderAndAnEmptyDatasetIsRejected) {
  SamplerOptions options;
  options.seed = 7;
  EXPECT_EQ(DefaultSampler(50, options).indices(), DefaultSampler(50, options).indices());
  SamplerOptions other = options;
  other.seed = 8;
  EXPECT_NE(DefaultSampler(50, options).indices(), DefaultSampler(50, other).indices());
  EXPECT_THROW(DefaultSampler(0, options), engine::dist::InvalidArgument);
  engine::data::InfiniteSampler a(50, {true, 7}), b(50, {true, 7}), c(50, {true, 8});
  const auto from_a = a.next(120);
  EXPECT_EQ(from_a, b.next(120));
  EXPECT_NE(from_a, c.next(120));
  EXPECT_THROW(engine::data::InfiniteSampler(0, {true, 7}), engine::dist::InvalidArgument);
}

}  // namespace
