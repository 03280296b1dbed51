#include "engine/model/unit_call.h"

#include <mutex>
#include <unordered_map>

namespace engine::model {
namespace {

// Module to handler, for every wrapper of the process (simulated ranks are
// threads, each with modules of its own).
struct Handlers {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, UnitCallHandler*> by_module;
};

Handlers& handlers() {
  static Handlers instance;
  return instance;
}

UnitCallHandler* handler_of(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(handlers().mutex);
  auto it = handlers().by_module.find(module);
  return it == handlers().by_module.end() ? nullptr : it->second;
}

}  // namespace

at::Tensor call_unit(const torch::nn::Module& module, const std::function<at::Tensor()>& body) {
  UnitCallHandler* handler = handler_of(&module);
  return handler ? handler->call(module, body) : body();
}

void attach_unit_handler(const torch::nn::Module* module, UnitCallHandler* handler) {
  std::lock_guard<std::mutex> lock(handlers().mutex);
  handlers().by_module[module] = handler;
}

void detach_unit_handler(const torch::nn::Module* module) {
  std::lock_guard<std::mutex> lock(handlers().mutex);
  handlers().by_module.erase(module);
}

}  // namespace engine::model
