#include <ATen/core/Tensor.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/version.h>
#include <unistd.h>
#include <zlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "engine/checkpoint/deferred_saves.h"
#include "engine/checkpoint/file.h"
#include "engine/checkpoint/state_dict.h"
#include "engine/dist/pickle.h"
#include "engine/io/file_system.h"

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
    engine::io::remove_all(folder_);
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
  EXPECT_NE(load_error().find("shorter than the 24-byte envelope"), std::string::npos);
  overwrite(full.substr(0, full.size() / 2));
  EXPECT_NE(load_error().find("its envelope is missing: truncated?"), std::string::npos);
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
  fs::create_directory(path_);
  EXPECT_NE(load_error().find("checkpoint " + path_ + ": a folder, not a checkpoint file"),
            std::string::npos);
  fs::remove(path_);
  save_file(path_, content(1));
  overwrite(bytes() + "extra");
  EXPECT_NE(load_error().find("trailing bytes"), std::string::npos);
}

// The file is one zip archive, as torch.save writes, that LibTorch's own
// reader (the one torch.load uses) takes whole, envelope and all.
TEST_F(CheckpointFileTest, TheFileIsAZipThatTorchsReaderTakesWhole) {
  save_file(path_, content(1.5));
  const std::string data = bytes();
  ASSERT_EQ(data.substr(0, 4), std::string("PK\x03\x04"));
  EXPECT_EQ(data.substr(data.size() - 24, 8), std::string("DECKPT\r\n"));
  const auto loaded = torch::jit::pickle_load(std::vector<char>(data.begin(), data.end()));
  EXPECT_EQ(value_of(loaded), 1.5);
}

// Checkpoints written before the envelope moved behind the archive.
TEST_F(CheckpointFileTest, ReadsFormatVersionOne) {
  const at::Tensor pickled = dist::pickle(content(3));
  const std::string payload(static_cast<const char*>(pickled.data_ptr()), pickled.numel());
  const auto crc = static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(payload.data()), payload.size()));
  const uint32_t version = 1;
  const uint64_t size = payload.size();
  std::string header("DECKPT\r\n");
  header.append(reinterpret_cast<const char*>(&version), sizeof(version));
  header.append(reinterpret_cast<const char*>(&crc), sizeof(crc));
  header.append(reinterpret_cast<const char*>(&size), sizeof(size));
  overwrite(header + payload);
  EXPECT_EQ(value_of(load_file(path_)), 3.0);
  overwrite(header + payload.substr(1));
  EXPECT_NE(load_error().find("truncated"), std::string::npos);
}

// An mmengine-style checkpoint written by PyTorch 2.x's torch.save
// (testdata/make_torch_saved.py): one SGD step with momentum from known
// weights, so every value is exact. LibTorch 1.13's unpickler lacks
// SETITEM, with which PyTorch 2.x pickles a one-entry dict (the optimizer's
// state of a parameter): there the error must say so.
// What is saved under a capture is what the caller held at save_file, even
// when it changes before the write; later saves to one path win, as they
// would written at once.
TEST_F(CheckpointFileTest, DeferredSavesWriteWhatWasSavedInOrderOnAnotherThread) {
  const std::string other = (folder_ / "other.pth").string();
  c10::IValue held = content(1);
  std::thread::id writer;
  StopsAtRename records([&] { writer = std::this_thread::get_id(); });
  DeferredSaves capture;
  save_file(path_, held);
  save_file(other, content(2));
  save_file(other, content(3));
  save_file((folder_ / "last.pth").string(), content(5), records);
  EXPECT_EQ(files_in_folder(), 0u) << "nothing is written before write_in_background";
  held.toGenericDict().at("weights").toTensor().fill_(7);
  EXPECT_EQ(capture.write_in_background().get(), "");
  EXPECT_EQ(value_of(load_file(path_)), 1.0);
  EXPECT_EQ(value_of(load_file(other)), 3.0);
  EXPECT_NE(writer, std::thread::id());
  EXPECT_NE(writer, std::this_thread::get_id());
  EXPECT_EQ(files_in_folder(), 3u) << "the last file stays under its temporary name";
  save_file(path_, content(4));
  EXPECT_EQ(value_of(load_file(path_)), 4.0) << "the capture ended: save_file writes again";
}

// IValue::deepcopy takes views of one storage for one tensor: copied with
// it, both halves below would be saved as the first.
TEST_F(CheckpointFileTest, ADeferredSaveKeepsEachViewOfOneStorageApart) {
  const at::Tensor base = at::arange(8, at::kLong);
  c10::impl::GenericDict dict(c10::StringType::get(), c10::AnyType::get());
  dict.insert("low", base.slice(0, 0, 4));
  dict.insert("high", base.slice(0, 4, 8));
  DeferredSaves capture;
  save_file(path_, dict);
  base.zero_();
  EXPECT_EQ(capture.write_in_background().get(), "");
  const c10::impl::GenericDict got = load_file(path_).toGenericDict();
  EXPECT_TRUE(at::equal(got.at("low").toTensor(), at::arange(4, at::kLong)));
  EXPECT_TRUE(at::equal(got.at("high").toTensor(), at::arange(4, 8, at::kLong)));
}

TEST_F(CheckpointFileTest, ADeferredSaveThatFailsStopsTheOnesAfterItAndSaysWhy) {
  StopsAtRename throws([] { throw io::FileError("disk full"); });
  DeferredSaves capture;
  save_file(path_, content(1), throws);
  save_file((folder_ / "later.pth").string(), content(2));
  const std::string failure = capture.write_in_background().get();
  EXPECT_NE(failure.find("checkpoint"), std::string::npos) << failure;
  EXPECT_NE(failure.find("disk full"), std::string::npos) << failure;
  EXPECT_EQ(files_in_folder(), 0u);
}

TEST_F(CheckpointFileTest, SavesNotHandedOverAreDroppedAndCapturesDoNotNest) {
  {
    DeferredSaves capture;
    save_file(path_, content(1));
    EXPECT_THROW(DeferredSaves(), std::logic_error);
  }
  EXPECT_EQ(files_in_folder(), 0u);
  save_file(path_, content(2));
  EXPECT_EQ(value_of(load_file(path_)), 2.0);
}

TEST(TorchSaveFileTest, LoadsWithItsValues) {
  const std::string path = "engine/checkpoint/testdata/torch_saved.pth";
  if constexpr (TORCH_VERSION_MAJOR < 2) {
    try {
      load_file(path);
      FAIL() << "LibTorch 1.13 read a PyTorch 2.x pickle with SETITEM after all";
    } catch (const CheckpointError& error) {
      EXPECT_NE(std::string(error.what()).find("LibTorch 1.13's lacks opcodes"), std::string::npos)
          << error.what();
    }
    return;
  }
  const auto loaded = load_file(path).toGenericDict();
  const auto meta = loaded.at("meta").toGenericDict();
  EXPECT_EQ(meta.at("epoch").toInt(), 3);
  EXPECT_EQ(meta.at("mmengine_version").toStringRef(), "0.10.7");
  const auto state = loaded.at("state_dict").toGenericDict();
  const at::Tensor weight = at::arange(6, at::kFloat).reshape({2, 3}) / 4 + (-0.1f);
  EXPECT_TRUE(state.at("weight").toTensor().equal(weight)) << state.at("weight").toTensor();
  EXPECT_TRUE(state.at("bias").toTensor().equal(at::tensor({0.5f, -0.5f}) + (-0.1f)));
  const auto momentum = loaded.at("optimizer").toGenericDict().at("state").toGenericDict();
  EXPECT_TRUE(momentum.at(int64_t{0})
                  .toGenericDict()
                  .at("momentum_buffer")
                  .toTensor()
                  .equal(at::ones({2, 3})));
}

TEST(TorchSaveFileTest, AStateDictsOrderedDictIsRefusedWithWhatToSaveInstead) {
  const std::string path = "engine/checkpoint/testdata/state_dict_ordered.pth";
  try {
    load_file(path);
    FAIL() << "LibTorch's unpickler read an OrderedDict with _metadata after all";
  } catch (const CheckpointError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("checkpoint " + path + ": neither"), std::string::npos) << message;
    EXPECT_NE(message.find("save dict(model.state_dict())"), std::string::npos) << message;
  }
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
