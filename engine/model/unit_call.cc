#include "engine/model/unit_call.h"

#include "engine/registry/attachments.h"

namespace engine::model {
namespace {

registry::Attachments<torch::nn::Module, UnitCallHandler>& handlers() {
  static registry::Attachments<torch::nn::Module, UnitCallHandler> instance;
  return instance;
}

}  // namespace

at::Tensor call_unit(const torch::nn::Module& module, const std::function<at::Tensor()>& body) {
  UnitCallHandler* handler = handlers().find(&module);
  return handler ? handler->call(module, body) : body();
}

void attach_unit_handler(const torch::nn::Module* module, UnitCallHandler* handler) {
  handlers().attach(module, handler);
}

void detach_unit_handler(const torch::nn::Module* module) { handlers().detach(module); }

}  // namespace engine::model
