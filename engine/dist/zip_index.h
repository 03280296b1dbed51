#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace engine::dist {

// The records of a torch.save archive (a zip whose records are stored, not
// compressed), read from its central directory and checked against the
// archive's own bytes before anything trusts a size it declares.
//
// Keys are the names of the records inside the first record's folder,
// without it ("data.pkl", "data/0"), in lower case: caffe2's
// PyTorchStreamReader finds records there, by name without case (miniz's
// lookup); records elsewhere are left out. There is at least one record; every
// record is stored (compression method 0), neither a folder nor encrypted,
// declares the same compressed and uncompressed size, and lies whole inside
// the archive; the names are distinct. The archive may end with a comment (the engine's checkpoint
// envelope is one). Zip64 fields are read where a size or offset needs them.
//
// Throws MalformedInput whose message starts with `what` and says which
// record or byte offset is wrong.
std::map<std::string, std::string_view> zip_records(std::string_view archive,
                                                    const std::string& what);

}  // namespace engine::dist
