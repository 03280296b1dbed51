#include "engine/dist/work.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace engine::dist {
namespace {

TEST(Work, ThenRunsItsContinuationOnceAfterSuccess) {
  int runs = 0;
  WorkPtr work = then(completed_work(), [&] { ++runs; });
  EXPECT_TRUE(work->is_completed());
  work->wait();
  work->wait();
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(work->exception(), nullptr);
}

TEST(Work, AnErrorSkipsTheContinuationAndComesFromEveryWait) {
  int runs = 0;
  WorkPtr work =
      then(completed_work(std::make_exception_ptr(std::runtime_error("lost"))), [&] { ++runs; });
  EXPECT_THROW(work->wait(), std::runtime_error);
  EXPECT_THROW(work->wait(), std::runtime_error);
  EXPECT_NE(work->exception(), nullptr);
  EXPECT_EQ(runs, 0);
}

TEST(Work, AFailingContinuationBecomesTheWorksError) {
  WorkPtr work = then(completed_work(), [] { throw std::logic_error("copy back failed"); });
  EXPECT_THROW(work->wait(), std::logic_error);
  EXPECT_NE(work->exception(), nullptr);
}

}  // namespace
}  // namespace engine::dist
