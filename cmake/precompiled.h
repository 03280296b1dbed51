// The LibTorch headers nearly every source of the engine and its suites
// includes, compiled once per target (target_precompile_headers): a CMake
// build on 2 cores spent most of its time parsing them again in each file.
#pragma once

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/nn.h>
#include <torch/optim.h>
