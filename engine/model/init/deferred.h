#pragma once

#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

// Deferred initialisation, as far as LibTorch 1.13 allows.
//
// PyTorch builds a large model on the meta device (shapes and dtypes, no
// storage) and lets FSDP allocate and initialise it one unit at a time, each
// unit sharded before the next is allocated. LibTorch 1.13 cannot build on
// the meta device: its modules allocate their parameters in their
// constructors, Module::to(kMeta) throws (set_data refuses a tensor of
// another backend), and a registered parameter cannot be replaced. So here a
// module is built, then deferred in place: defer() turns each of its
// parameters and buffers into a meta tensor of the same shape and dtype,
// keeping the tensor objects the module and its members hold (and with them
// names and requires_grad), and frees their storage. Defer each submodule
// as it is built, and no more than one exists in full at once.
//
// MMFullyShardedDataParallel materialises deferred modules unit by unit
// (FSDPOptions::param_init_fn).
namespace engine::model::init {

// Every parameter and buffer of `module` and its submodules becomes a meta
// tensor in place. InvalidArgument if a parameter is in an autograd graph
// still alive (its gradient accumulator recorded the device).
void defer(torch::nn::Module& module);

// The names of `module`'s deferred parameters and buffers (of its
// submodules too when `recurse`), parameters first.
std::vector<std::string> deferred_names(const torch::nn::Module& module, bool recurse = true);

// Gives every deferred parameter and buffer `module` holds itself (not its
// submodules') storage on `device`, filled with zeros, in place. Returns
// whether there was any.
bool materialize(torch::nn::Module& module, c10::Device device);

}  // namespace engine::model::init
