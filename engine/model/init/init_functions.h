#pragma once

#include <torch/nn/module.h>

#include <functional>

#include "engine/registry/registry.h"

// The functions a param_init_fn config names, as mmengine resolves them from
// its FUNCTIONS registry (and, unlike mmengine, with their keyword
// arguments applied): {"type": "normal_init", "std": 0.02}.
namespace engine::model::init {

// Initialises the parameters and buffers `module` holds itself.
using ParamInitFn = std::function<void(torch::nn::Module& module)>;

// Built in, after mmengine.model.weight_init; each fills the module's own
// "weight" and "bias" where it has them (a module without them is left as
// it is) and draws from LibTorch's default generator:
//   constant_init  val, bias (0)
//   normal_init    mean (0), std (1), bias (0)
//   uniform_init   a (0), b (1), bias (0)
//   xavier_init    gain (1), bias (0), distribution ("normal" | "uniform")
//   kaiming_init   a (0), mode ("fan_out" | "fan_in"), nonlinearity ("relu" |
//                  "leaky_relu" | "linear" | "tanh" | "sigmoid"), bias (0),
//                  distribution ("normal" | "uniform")
// A ConfigError: a negative std or gain, b below a (when built), or values
// that the parameter's dtype cannot hold or that come out not finite (when
// the function runs).
using InitFunctionRegistry = registry::Registry<ParamInitFn>;
InitFunctionRegistry& param_init_functions();

}  // namespace engine::model::init
