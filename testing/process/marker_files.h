#pragma once

#include <chrono>
#include <filesystem>
#include <thread>
#include <vector>

// How the process tests order ranks without depending on timing: one rank
// writes a marker file once something has happened, the others wait for it.
// The wait is bounded, so a marker that never comes fails a test instead of
// hanging it, and it sleeps between looks, so nothing spins.
// True once every file exists; false if `limit` passed first.
inline bool await_files(const std::vector<std::filesystem::path>& files,
                        std::chrono::milliseconds limit) {
  constexpr auto kLook = std::chrono::milliseconds(20);
  for (auto waited = std::chrono::milliseconds(0); waited < limit; waited += kLook) {
    bool all = true;
    for (const auto& file : files) all = all && std::filesystem::exists(file);
    if (all) return true;
    std::this_thread::sleep_for(kLook);
  }
  return false;
}
