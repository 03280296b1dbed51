#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace launch {

// A request the store cannot serve: its connection is to be closed.
struct Unservable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One client's connection as the store sees it.
struct StoreConnection {
  std::string peer;
  std::string in;   // bytes of requests not yet served
  std::string out;  // answers not yet sent
  std::set<std::string> awaited;
  bool ended = false;  // the peer closed its side
};

// The job store's keys and the requests of LibTorch 1.x's TCPStore clients,
// apart from sockets (StoreServer moves the bytes). A connection's received
// bytes go into its `in`; serve_arrived() serves every request there that
// has fully arrived and leaves its answers in `out`s: the requester's, and
// those of the connections whose wait or watch the request ended. Answers
// are LibTorch 1.13's server's, with the differences store_server.h lists.
class StoreService {
 public:
  struct Request;

  std::map<int, StoreConnection> connections;  // by socket

  // Serves every request that has fully arrived on `socket`; throws
  // Unservable at one it cannot serve (the requests before it are served).
  void serve_arrived(int socket);
  // Forgets a closed connection, its waits and its watches.
  void forget(int socket);
  // How many connections wait for keys.
  int waiting() const;

 private:
  enum class Change : uint8_t;

  void serve(int socket, const Request& request);
  const std::string& value_of(const std::string& key) const;
  bool all_set(const std::vector<std::string>& keys) const;
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired);
  int64_t add(const std::string& key, int64_t amount);
  int64_t erase(const std::string& key);
  void wait(int socket, const std::vector<std::string>& keys);
  void cancel_wait(int socket);
  void write(const std::string& key, const std::string& value);
  void wake_waiters(const std::string& key);
  void tell_watchers(const std::string& key, Change change, const std::string& before,
                     const std::string& after);

  std::map<std::string, std::string> values_;
  std::map<std::string, std::set<int>> waiters_;
  std::map<std::string, std::set<int>> watchers_;
};

}  // namespace launch
