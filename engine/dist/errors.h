#pragma once

#include <exception>
#include <stdexcept>
#include <string>

namespace engine::dist {

// Every error the engine raises derives from DistError. A message says what
// happened, on which rank(s), and what to do about it.
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A caller passed something the operation cannot accept (unknown reduce op,
// root outside the group, wrong tensor count, unsupported dtype...).
class InvalidArgument : public DistError {
 public:
  using DistError::DistError;
};

// Ranks made different calls where the same call was required (kind, dtype,
// shape, reduce op, root, group or sequence number). The message lists the
// call of every rank.
class CollectiveMismatch : public DistError {
 public:
  using DistError::DistError;
};

// A wait ran past its deadline; the message names the ranks that never came.
class Timeout : public DistError {
 public:
  using DistError::DistError;
};

// Another rank failed (threw, crashed); this rank cannot go on with it.
class PeerFailure : public DistError {
 public:
  using DistError::DistError;
};

// Bytes from outside the process (a file, a peer's frame) that the engine
// refuses to read: the message names where they came from, what in them was
// wrong and where (a record, a byte offset).
class MalformedInput : public DistError {
 public:
  using DistError::DistError;
};

// The engine error's type: "Timeout", "PeerFailure", "CollectiveMismatch",
// "InvalidArgument", "MalformedInput" or "DistError"; nullptr for nullptr and
// other errors.
const char* dist_error_kind(const std::exception_ptr& error);

// "[rank 3] " + what: the prefix every engine message starts with.
std::string on_rank(int rank, const std::string& what);

}  // namespace engine::dist
