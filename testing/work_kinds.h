#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/dist/dist.h"

// Every kind of Work the engine hands out, for the tests that a rank that
// never comes ends each one's wait(timeout) in a Timeout: the backends' own
// works (one per collective), the ones wrapped to divide a mean or to write
// a strided tensor back, and a node-shared all_reduce (the flight
// recorder's wrapping is a property of the run, not of the call).
//
// Each kind runs on a group of two ranks. Group rank 0 (the waiter) starts
// its call and waits; group rank 1 (the late rank) makes the matching call
// only when the test says so. Where a call has a root, the root is chosen so
// that the waiter cannot finish alone: it receives.
namespace work_kinds {

// The waiter's side of a call: the Work, and whether the waiter's results
// are right once it completed (the late rank's inputs are 2s, the waiter's 1s).
struct Waiting {
  engine::dist::WorkPtr work;
  std::function<bool()> results_are_right;
};

// One kind, set up on both ranks of `group` (collective steps such as
// allocating a node-shared buffer happen here), then called on each rank.
using Call = std::function<Waiting()>;
struct Kind {
  std::string name;
  std::function<Call(const engine::dist::GroupPtr& group)> prepare;
  // A send or receive: Gloo ends one whose wait timed out (and closes the
  // connections of its group), so it cannot complete late there.
  bool point_to_point = false;
};

std::vector<Kind> all_kinds();

// Whether `message` names world rank `rank` ("[rank N]") and none of the
// other ranks of a world of `world_size`: the waiter's group ranks differ
// from its world ranks, so a message naming a group rank shows.
bool names_only_rank(const std::string& message, int rank, int world_size);

}  // namespace work_kinds
