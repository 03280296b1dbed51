#include "tools/launch/store_service.h"

#include <charconv>
#include <cstring>
#include <optional>
#include <utility>

namespace launch {

// LibTorch 1.13's values on the wire (torch/csrc/distributed/c10d/TCPStore.cpp).
// Outside the anonymous namespace: Request, which has external linkage,
// holds one.
enum class Query : uint8_t {
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDeleteKey,
};

namespace {

constexpr uint8_t kReady = 0;
constexpr uint8_t kNotReady = 1;
constexpr uint8_t kStopWaiting = 0;

constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
// LibTorch 2.x's clients open with VALIDATE (type 0, 1.x's SET) and this
// number, then PING: read as 1.x's protocol, a SET whose key's length has
// these low 32 bits and is far over the bound.
constexpr uint64_t kLibTorch2Magic = 0x3C85F7CE;
constexpr uint64_t kMaxKeysInARequest = uint64_t{1} << 20;

}  // namespace

struct StoreService::Request {
  Query query = Query::kSet;
  std::vector<std::string> strings;  // the key or keys, then the values
  int64_t amount = 0;                // add's
};

namespace {

// Takes a request's fields from the front of a connection's bytes; each take
// returns false while its field has not fully arrived.
class Reader {
 public:
  explicit Reader(const std::string& bytes) : bytes_(bytes) {}

  size_t consumed() const { return at_; }

  template <typename T>
  bool take(T& value) {
    if (bytes_.size() - at_ < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }

  bool take(std::string& text) {
    uint64_t size = 0;
    if (!take(size)) return false;
    if (size > kMaxStringBytes) {
      if ((size & 0xFFFFFFFF) == kLibTorch2Magic) {
        throw Unservable(
            "a client of LibTorch 2.x or later (its handshake), and this store speaks LibTorch "
            "1.x's protocol: build engine-launch against the LibTorch the ranks use");
      }
      throw Unservable("a string of " + std::to_string(size) + " bytes (at most 1 GiB)");
    }
    if (bytes_.size() - at_ < size) return false;
    text.assign(bytes_, at_, size);
    at_ += size;
    return true;
  }

 private:
  const std::string& bytes_;
  size_t at_ = 0;
};

// How many strings a request of this type carries, read from the request
// itself for check and wait; nullopt while that count has not arrived.
std::optional<uint64_t> strings_of(Query query, Reader& reader) {
  switch (query) {
    case Query::kSet:
      return 2;
    case Query::kCompareSet:
      return 3;
    case Query::kGet:
    case Query::kAdd:
    case Query::kWatchKey:
    case Query::kDeleteKey:
      return 1;
    case Query::kNumKeys:
      return 0;
    case Query::kCheck:
    case Query::kWait: {
      uint64_t keys = 0;
      if (!reader.take(keys)) return std::nullopt;
      if (keys > kMaxKeysInARequest) {
        throw Unservable("a check or wait for " + std::to_string(keys) + " keys");
      }
      return keys;
    }
  }
  throw Unservable("an unknown request type " + std::to_string(static_cast<int>(query)));
}

// The request at the front of `bytes` and its length in bytes, or nullopt
// while it has not arrived whole.
std::optional<std::pair<StoreService::Request, size_t>> parse(const std::string& bytes) {
  Reader reader(bytes);
  StoreService::Request request;
  if (!reader.take(request.query)) return std::nullopt;
  const std::optional<uint64_t> strings = strings_of(request.query, reader);
  if (!strings) return std::nullopt;
  request.strings.resize(*strings);
  for (std::string& text : request.strings) {
    if (!reader.take(text)) return std::nullopt;
  }
  if (request.query == Query::kAdd && !reader.take(request.amount)) return std::nullopt;
  return std::pair{std::move(request), reader.consumed()};
}

void put_byte(std::string& out, uint8_t value) { out.push_back(static_cast<char>(value)); }

void put_number(std::string& out, int64_t value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(value));
}

void put_string(std::string& out, const std::string& text) {
  const uint64_t size = text.size();
  out.append(reinterpret_cast<const char*>(&size), sizeof(size));
  out.append(text);
}

int64_t number_in(const std::string& key, const std::string& value) {
  int64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size()) {
    throw Unservable("add to key '" + key + "', whose value is not a number");
  }
  return number;
}

}  // namespace

enum class StoreService::Change : uint8_t { kUpdated, kCreated, kDeleted, kWatchRegistered };

void StoreService::serve_arrived(int socket) {
  StoreConnection& connection = connections.at(socket);
  while (auto request = parse(connection.in)) {
    connection.in.erase(0, request->second);
    serve(socket, request->first);
  }
}

void StoreService::forget(int socket) {
  cancel_wait(socket);
  for (auto& [key, watchers] : watchers_) watchers.erase(socket);
  connections.erase(socket);
}

int StoreService::waiting() const {
  int count = 0;
  for (const auto& [socket, connection] : connections) count += !connection.awaited.empty();
  return count;
}

void StoreService::serve(int socket, const Request& request) {
  cancel_wait(socket);
  std::string& out = connections.at(socket).out;
  const std::vector<std::string>& strings = request.strings;
  switch (request.query) {
    case Query::kSet:
      return write(strings[0], strings[1]);
    case Query::kCompareSet:
      return put_string(out, compare_set(strings[0], strings[1], strings[2]));
    case Query::kGet:
      return put_string(out, value_of(strings[0]));
    case Query::kAdd:
      return put_number(out, add(strings[0], request.amount));
    case Query::kCheck:
      return put_byte(out, all_set(strings) ? kReady : kNotReady);
    case Query::kWait:
      return wait(socket, strings);
    case Query::kNumKeys:
      return put_number(out, static_cast<int64_t>(values_.size()));
    case Query::kWatchKey:
      watchers_[strings[0]].insert(socket);
      return put_byte(out, static_cast<uint8_t>(Change::kWatchRegistered));
    case Query::kDeleteKey:
      return put_number(out, erase(strings[0]));
  }
}

const std::string& StoreService::value_of(const std::string& key) const {
  const auto found = values_.find(key);
  if (found == values_.end()) throw Unservable("get of key '" + key + "', which is not set");
  return found->second;
}

bool StoreService::all_set(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (!values_.count(key)) return false;
  }
  return true;
}

// LibTorch's answer: the value the key holds after the call, except that a
// missing key with a non-empty expected value answers that value.
std::string StoreService::compare_set(const std::string& key, const std::string& expected,
                                      const std::string& desired) {
  const auto found = values_.find(key);
  if (found == values_.end()) {
    if (!expected.empty()) return expected;
    write(key, desired);
  } else if (found->second == expected) {
    write(key, desired);
  }
  return values_.at(key);
}

int64_t StoreService::add(const std::string& key, int64_t amount) {
  const auto found = values_.find(key);
  const int64_t before = found == values_.end() ? 0 : number_in(key, found->second);
  int64_t sum = 0;
  if (__builtin_add_overflow(before, amount, &sum)) {
    throw Unservable("add of " + std::to_string(amount) + " to key '" + key + "', which holds " +
                     std::to_string(before) + ": the sum overflows 64 bits");
  }
  write(key, std::to_string(sum));
  return sum;
}

int64_t StoreService::erase(const std::string& key) {
  const auto found = values_.find(key);
  if (found == values_.end()) return 0;
  tell_watchers(key, Change::kDeleted, found->second, "");
  values_.erase(found);
  return 1;
}

void StoreService::wait(int socket, const std::vector<std::string>& keys) {
  StoreConnection& connection = connections.at(socket);
  for (const std::string& key : keys) {
    if (values_.count(key)) continue;
    connection.awaited.insert(key);
    waiters_[key].insert(socket);
  }
  if (connection.awaited.empty()) put_byte(connection.out, kStopWaiting);
}

void StoreService::cancel_wait(int socket) {
  StoreConnection& connection = connections.at(socket);
  for (const std::string& key : connection.awaited) {
    auto found = waiters_.find(key);
    found->second.erase(socket);
    if (found->second.empty()) waiters_.erase(found);
  }
  connection.awaited.clear();
}

void StoreService::write(const std::string& key, const std::string& value) {
  const auto found = values_.find(key);
  if (found == values_.end()) {
    tell_watchers(key, Change::kCreated, "", value);
    values_.emplace(key, value);
  } else {
    tell_watchers(key, Change::kUpdated, found->second, value);
    found->second = value;
  }
  wake_waiters(key);
}

void StoreService::wake_waiters(const std::string& key) {
  const auto found = waiters_.find(key);
  if (found == waiters_.end()) return;
  for (const int socket : found->second) {
    StoreConnection& connection = connections.at(socket);
    connection.awaited.erase(key);
    if (connection.awaited.empty()) put_byte(connection.out, kStopWaiting);
  }
  waiters_.erase(found);
}

void StoreService::tell_watchers(const std::string& key, Change change, const std::string& before,
                                 const std::string& after) {
  const auto found = watchers_.find(key);
  if (found == watchers_.end()) return;
  for (const int socket : found->second) {
    std::string& out = connections.at(socket).out;
    put_byte(out, static_cast<uint8_t>(change));
    put_string(out, key);
    put_string(out, before);
    put_string(out, after);
  }
}

}  // namespace launch
