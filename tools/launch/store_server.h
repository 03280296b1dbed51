#pragma once

#include <atomic>
#include <cstdint>
#include <thread>

namespace launch {

// A server for c10d's TCPStore clients of LibTorch 1.x (the protocol of
// Debian's 1.13: set, compare_set, get, add, check, wait, getNumKeys,
// watchKey, deleteKey), for the job's store that node 0's launcher hosts.
//
// LibTorch 1.x's own server reads each request to its end before it serves
// anyone else, so a node cut off in the middle of a request stops the store
// for every other node until the job's timeout. This one buffers each
// connection's bytes and serves a request once all of it has arrived, from
// one thread that never blocks on a client.
//
// Its answers are those of LibTorch 1.13's server, with three differences,
// each where 1.13's served no client well: a key that compare_set creates
// wakes the clients waiting for it; a client's next request cancels the wait
// it gave up on (1.13's client has no cancel request, so the late answer
// would be read as the answer to another request); a request it cannot
// serve (an unknown type, get or add of what is not there to read, an add
// that overflows, a string over 1 GiB, LibTorch 2.x's handshake) closes
// that connection alone, with a line on stderr that says why.
class StoreServer {
 public:
  // Listens on `port` on every interface, IPv6 and IPv4 (0: a free port,
  // see port()), and serves until destroyed. Throws std::system_error naming
  // the port when it cannot listen.
  explicit StoreServer(int port);
  // Stops serving and closes every connection.
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // How many connections wait for keys now (for tests).
  int waiting() const { return waiting_.load(); }

 private:
  void serve();

  int listener_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<int> waiting_{0};
  std::thread thread_;
};

}  // namespace launch
