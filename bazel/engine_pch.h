// The LibTorch headers that many of the engine's sources include, compiled
// once per configuration (bazel/pch.bzl) under --config=pch and loaded by
// every target of bazel/cc.bzl's rules before its own code, so that no
// source parses them again; the CMake build precompiles it too
// (dist_engine_pch in CMakeLists.txt). Sources still include what they use:
// without a precompiled header this one is never seen.
#ifndef DIST_ENGINE_BAZEL_ENGINE_PCH_H_
#define DIST_ENGINE_BAZEL_ENGINE_PCH_H_

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/Dict.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/GradMode.h>
#include <c10/core/ScalarType.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/utils/tensor_flatten.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/sgd.h>
#include <torch/types.h>
#include <torch/utils.h>
#include <torch/version.h>

#include <torch/csrc/distributed/c10d/Work.hpp>

#endif  // DIST_ENGINE_BAZEL_ENGINE_PCH_H_
