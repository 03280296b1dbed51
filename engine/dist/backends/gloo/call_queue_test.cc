#include "engine/dist/backends/gloo/call_queue.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

namespace engine::dist::gloo {
namespace {

TEST(CallQueueTest, RunsCallsInOrderAndHandsBackWhatTheyThrew) {
  std::vector<int> ran;
  CallQueue queue;
  auto first = queue.enqueue([&] { ran.push_back(1); });
  auto failing = queue.enqueue([] { throw std::runtime_error("refused"); });
  auto last = queue.enqueue([&] { ran.push_back(3); });
  EXPECT_TRUE(first->wait());
  EXPECT_THROW(failing->wait(), std::runtime_error);
  EXPECT_TRUE(last->wait());
  EXPECT_EQ(ran, std::vector<int>({1, 3}));
}

// Before the fix, a throw from before_each (a pair's mode switch on a
// closed connection) escaped the queue's thread and ended the process.
TEST(CallQueueTest, WhatBeforeEachThrowsFailsThatCallOnly) {
  int before = 0;
  bool ran = false;
  CallQueue queue([&] {
    if (++before == 1) throw std::runtime_error("connection reset by peer");
  });
  auto failed = queue.enqueue([&] { ran = true; });
  try {
    failed->wait();
    ADD_FAILURE() << "the call ran although before_each failed";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "connection reset by peer");
  }
  EXPECT_FALSE(ran);
  EXPECT_TRUE(queue.enqueue([&] { ran = true; })->wait());
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace engine::dist::gloo
