#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "engine/dist/info.h"

// mmengine.device for the devices LibTorch runs here: the CPU and CUDA.
namespace engine::device {

// True when LibTorch was built with CUDA and sees at least one device.
bool is_cuda_available();

// The type name of the device training should use: "cuda" when
// is_cuda_available(), else "cpu" (mmengine's get_device, whose npu, mlu,
// mps and musa branches have no LibTorch counterpart here).
std::string get_device();

// Where a group's collectives take their tensors (declared in
// engine/dist/info.h, offered here too as in mmengine.dist).
using dist::get_comm_device;

}  // namespace engine::device
