#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace engine::dist::gloo {

// Tensors as the gloo backend hands them to Gloo, and back.

// Whether Gloo can read and write `tensor` in place: CPU memory, strided,
// contiguous.
bool is_plain(const at::Tensor& tensor);

// `tensor` where Gloo can reach it (CPU memory, contiguous): itself when it
// is there already, else a copy of its values.
at::Tensor plain(const at::Tensor& tensor);
std::vector<at::Tensor> plain(const std::vector<at::Tensor>& tensors);

// A plain tensor's bytes, flat.
at::Tensor bytes_of(const at::Tensor& plain);

// Writes a plain copy's values back to where the caller holds them (nothing
// when `copy` is `original`).
void copy_back(at::Tensor& original, const at::Tensor& copy);

// A fresh CPU block with one `input` a rank, a row each.
at::Tensor block_for(const at::Tensor& input, int ranks);

// Copies a block's rows (see block_for) out to `outputs`, row r to output r.
void copy_rows(std::vector<at::Tensor> outputs, const at::Tensor& block);

// Whether `outputs` holds `size` tensors of `input`'s dtype and element count.
bool holds_one_input_a_rank(const std::vector<at::Tensor>& outputs, const at::Tensor& input,
                            int size);

}  // namespace engine::dist::gloo
