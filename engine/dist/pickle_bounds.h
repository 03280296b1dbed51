#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace engine::dist {

// Containers inside containers, counting the outermost, in a pickle from
// outside the process.
constexpr size_t kMaxPickleNesting = 100;
// Values a pickle may build, counting a value once per reference to it:
// this many, or four per byte of the pickle where that is more.
constexpr size_t kMinPickleValueBudget = size_t{1} << 20;

// The archive format versions LibTorch 1.13 and 2.x read (caffe2's
// kMinSupportedFileFormatVersion and kMaxSupportedFileFormatVersion).
constexpr int kMinArchiveVersion = 1;
constexpr int kMaxArchiveVersion = 10;

// Checks, before LibTorch's unpickler reads a byte of it, that `archive` (a
// torch.save zip: the engine's frames, part files and checkpoints, or
// torch.save's own files at its default pickle protocol 2) builds only what
// the engine writes, and asks for no more memory than its own bytes hold:
//
// - the zip as zip_records checks it, with a format version record
//   (.data/version, else version) between the two limits above;
// - its data.pkl uses only protocol-2 opcodes that build data (no BUILD, no
//   INST or OBJ), names only these globals: collections.OrderedDict (called
//   with no arguments), torch._utils._rebuild_tensor_v2, torch's
//   <dtype>Storage types inside a storage's persistent id, and
//   torch.jit._pickle's build_intlist, build_doublelist, build_boollist,
//   build_tensorlist and restore_type_tag, and ends at its STOP with one value;
// - no stack underflow, no mark left open; memo ids are written in order
//   (BINPUT n where n values are memoized) and read back only once written;
// - a storage's record holds exactly its declared elements, and every tensor
//   lies inside its storage with no more elements than the storage (an
//   expanded view must be saved contiguous);
// - no container contains itself or is changed once inside another, nesting
//   stays within kMaxPickleNesting, and the values it builds stay within the
//   budget above;
// - every length inside it (strings, globals, records) fits in the bytes left.
//
// Throws MalformedInput that starts with `what`, names the rule broken and
// where (the record, or the byte of data.pkl).
void check_pickle_archive(std::string_view archive, const std::string& what);

}  // namespace engine::dist
