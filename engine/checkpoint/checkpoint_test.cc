#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "engine/checkpoint/file.h"
#include "engine/checkpoint/state_dict.h"

namespace engine::checkpoint {
namespace {

namespace fs = std::filesystem;

// The real file system, except that renaming runs `instead` (which dies or
// throws), so that a save stops where its file is complete but not in place.
class StopsAtRename : public io::FileSystem {
 public:
  explicit StopsAtRename(std::function<void()> instead) : instead_(std::move(instead)) {}

  int create_directories(const std::string& folder) override {
    return real_.create_directories(folder);
  }
  int open_for_write(const std::string& path, int& handle) override {
    return real_.open_for_write(path, handle);
  }
  int write(int handle, std::string_view data) override { return real_.write(handle, data); }
  int sync(int handle) override { return real_.sync(handle); }
  int close(int handle) override { return real_.close(handle); }
  int rename(const std::string&, const std::string&) override {
    instead_();
    return 0;
  }
  int remove(const std::string& path) override { return real_.remove(path); }
  int sync_folder(const std::string& folder) override { return real_.sync_folder(folder); }

 private:
  io::FileSystem& real_ = io::posix_file_system();
  std::function<void()> instead_;
};

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    folder_ = fs::path(::testing::TempDir()) /
              ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(folder_);
    fs::create_directories(folder_);
    path_ = (folder_ / "ckpt.pth").string();
  }

  static c10::IValue content(double value) {
    c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
    dict.insert("weights", at::full({3, 2}, value, at::kDouble));
    dict.insert("iter", static_cast<int64_t>(value));
    return dict;
  }
  static double value_of(const c10::IValue& loaded) {
    return loaded.toGenericDict().at("weights").toTensor()[1][1].item<double>();
  }
  std::string bytes() const {
    std::ifstream in(path_, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void overwrite(const std::string& data) const {
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << data;
  }
  std::string load_error() const {
    try {
      load_file(path_);
    } catch (const CheckpointError& error) {
      return error.what();
    }
    return "no error";
  }
  size_t files_in_folder() const {
    return static_cast<size_t>(std::distance(fs::directory_iterator(folder_), {}));
  }

  fs::path folder_;
  std::string path_;
};

TEST_F(CheckpointFileTest, RoundTripsNestedContent) {
  save_file(path_, content(2.5));
  const auto loaded = load_file(path_);
  EXPECT_EQ(value_of(loaded), 2.5);
  EXPECT_EQ(loaded.toGenericDict().at("iter").toInt(), 2);
  EXPECT_EQ(files_in_folder(), 1u) << "the temporary file must be gone";
}

TEST_F(CheckpointFileTest, ACrashBetweenWriteAndRenameLeavesTheOldFileWhole) {
  save_file(path_, content(1));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopsAtRename dies([] { ::_exit(42); });
    save_file(path_, content(2), dies);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 42) << "the child must have died before the rename";
  EXPECT_EQ(value_of(load_file(path_)), 1.0);
  EXPECT_EQ(files_in_folder(), 2u) << "the dead writer's complete temporary file stays beside it";
}

TEST_F(CheckpointFileTest, AFailedWriteRemovesItsTemporaryFileAndKeepsTheOld) {
  save_file(path_, content(1));
  StopsAtRename throws([] { throw io::FileError("disk full"); });
  EXPECT_THROW(save_file(path_, content(2), throws), CheckpointError);
  EXPECT_EQ(value_of(load_file(path_)), 1.0);
  EXPECT_EQ(files_in_folder(), 1u);
}

TEST_F(CheckpointFileTest, TruncationIsNamedWithTheFile) {
  save_file(path_, content(1));
  const std::string full = bytes();
  overwrite(full.substr(0, full.size() - 10));
  const auto error = load_error();
  EXPECT_NE(error.find("checkpoint " + path_ + ": truncated"), std::string::npos) << error;
  overwrite(full.substr(0, 5));
  EXPECT_NE(load_error().find("shorter than the 24-byte header"), std::string::npos);
}

TEST_F(CheckpointFileTest, AFlippedBitIsCaughtByTheChecksum) {
  save_file(path_, content(1));
  std::string data = bytes();
  data[data.size() / 2] ^= 0x10;
  overwrite(data);
  EXPECT_NE(load_error().find("corrupt: the CRC-32"), std::string::npos);
}

TEST_F(CheckpointFileTest, ForeignAndMissingFilesAreNamed) {
  overwrite(std::string(100, 'x'));
  EXPECT_NE(load_error().find("not a dist-engine checkpoint"), std::string::npos);
  fs::remove(path_);
  EXPECT_NE(load_error().find("checkpoint " + path_ + ": cannot open it"), std::string::npos);
  save_file(path_, content(1));
  overwrite(bytes() + "extra");
  EXPECT_NE(load_error().find("trailing bytes"), std::string::npos);
}

TEST(StateDictTest, CopiesParametersAndBuffersIntoAFreshModule) {
  torch::nn::Sequential source(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  {
    torch::NoGradGuard no_grad;
    for (auto& tensor : source->parameters()) tensor.uniform_();
    source[1]->named_buffers()["running_mean"].fill_(0.25);
  }
  torch::nn::Sequential target(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  const auto skipped = load_state_dict(*target, state_dict(*source), true, "test");
  EXPECT_TRUE(skipped.empty());
  for (const auto& entry : state_dict(*source)) {
    EXPECT_TRUE(at::equal(entry.second, state_dict(*target).at(entry.first))) << entry.first;
  }
  EXPECT_EQ(state_dict(*target).at("1.running_mean")[0].item<float>(), 0.25f);
}

TEST(StateDictTest, RevisedKeysLoadAWrappedModelsCheckpoint) {
  torch::nn::Linear source(2, 2), target(2, 2);
  StateDict wrapped;
  for (const auto& entry : state_dict(*source)) wrapped["module." + entry.first] = entry.second;
  EXPECT_THROW(load_state_dict(*target, wrapped, true, "wrapped.pth"), CheckpointError);
  load_state_dict(*target, revise_keys(wrapped, default_key_revisions()), true, "wrapped.pth");
  EXPECT_TRUE(at::equal(target->weight, source->weight));
}

TEST(StateDictTest, StrictErrorsListEveryProblem) {
  torch::nn::Linear model(2, 3);
  StateDict state = state_dict(*torch::nn::Linear(2, 3));
  state.erase("bias");
  state["extra"] = at::zeros({1});
  try {
    load_state_dict(*model, state, true, "a.pth");
    FAIL() << "strict loading accepted missing and unexpected keys";
  } catch (const CheckpointError& error) {
    EXPECT_NE(std::string(error.what()).find("missing keys: bias; unexpected keys: extra"),
              std::string::npos)
        << error.what();
  }
  const auto skipped = load_state_dict(*model, state, false, "a.pth");
  EXPECT_EQ(skipped, (std::vector<std::string>{"bias", "extra"}));
  state["weight"] = at::zeros({3, 3});
  EXPECT_THROW(load_state_dict(*model, state, false, "a.pth"), CheckpointError);
}

}  // namespace
}  // namespace engine::checkpoint
