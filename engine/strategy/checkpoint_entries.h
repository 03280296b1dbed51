#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <string>

#include "engine/optim/optimizer_state.h"

// How a strategy's checkpoint keeps what differs by rank, and how its
// entries are read back: every error a checkpoint::CheckpointError that
// names the file, the entry and this rank.
namespace engine::strategy {

// Every rank's `mine` stacked in rank order (collective when distributed).
at::Tensor rows_of_all_ranks(const at::Tensor& mine);

// This rank's row of such rows, checked to come from as many ranks as there
// are now; else an error naming `path` and that `saved_as` resumes only at
// the world size that saved it.
at::Tensor my_row(const at::Tensor& rows, const std::string& path,
                  const std::string& saved_as = "was saved inside a gradient accumulation group");

// A checkpoint of one file (BaseStrategy's default layout), read on every
// rank.
c10::impl::GenericDict read_single_file(const std::string& path);

// content[key], or an error naming the file and the key.
c10::IValue checkpoint_entry(const c10::impl::GenericDict& content, const std::string& key,
                             const std::string& path);

// An optimizer state kept under content[key], or an error naming the file,
// the key and what is wrong with it.
optim::OptimizerState optimizer_entry(const c10::impl::GenericDict& content, const std::string& key,
                                      const std::string& path);

// The optimizer state `entry` holds, or an error starting with `what`
// (where it came from).
optim::OptimizerState optimizer_value(const c10::IValue& entry, const std::string& what);

}  // namespace engine::strategy
