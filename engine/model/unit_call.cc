#include "engine/model/unit_call.h"

#include <torch/nn/module.h>

#include "engine/dist/errors.h"
#include "engine/dist/info.h"
#include "engine/model/activation_checkpoint/checkpointed_modules.h"
#include "engine/registry/attachments.h"

namespace engine::model {
namespace {

registry::Attachments<torch::nn::Module, UnitCallHandler>& handlers() {
  static registry::Attachments<torch::nn::Module, UnitCallHandler> instance;
  return instance;
}

UnitCallHandler* handler_of(const torch::nn::Module& module) {
  UnitCallHandler* handler = handlers().find(&module);
  if (handler != nullptr && inside_checkpoint()) {
    throw dist::InvalidArgument(dist::on_rank(
        dist::get_rank(),
        "the sharding unit " + module.name() +
            " runs inside a checkpointed module, whose recomputation would read its freed "
            "parameters: checkpoint the unit itself or modules inside it"));
  }
  return handler;
}

}  // namespace

at::Tensor call_unit(const torch::nn::Module& module, const std::function<at::Tensor()>& body) {
  UnitCallHandler* handler = handler_of(module);
  return handler ? handler->call(module, body) : body();
}

at::Tensor call_unit(const torch::nn::Module& module, const at::Tensor& input,
                     const std::function<at::Tensor(const at::Tensor&)>& body) {
  const CheckpointOptions* options = checkpoint_options(module);
  auto run = [&] { return options ? checkpoint(module, input, body, *options) : body(input); };
  UnitCallHandler* handler = handler_of(module);
  return handler ? handler->call(module, run) : run();
}

void attach_unit_handler(const torch::nn::Module* module, UnitCallHandler* handler) {
  handlers().attach(module, handler);
}

void detach_unit_handler(const torch::nn::Module* module) { handlers().detach(module); }

}  // namespace engine::model
