// libFuzzer target: the job's store (tools/launch/store_service.h) fed what
// three clients send, in any order and cut anywhere. The input is chunks of
// [client (byte % 3)][length (byte)][that many bytes]. A request the store
// cannot serve closes its client (Unservable), as the server does; any other
// exception, a crash, a sanitizer report, or a wait counted for no waiting
// connection is a bug.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "tools/launch/store_service.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  launch::StoreService store;
  for (int client = 0; client < 3; ++client) store.connections[client];
  for (size_t at = 0; at + 2 <= size;) {
    const int client = data[at] % 3;
    const size_t length = std::min<size_t>(data[at + 1], size - at - 2);
    store.connections[client].in.append(reinterpret_cast<const char*>(data + at + 2), length);
    at += 2 + length;
    try {
      store.serve_arrived(client);
    } catch (const launch::Unservable&) {
      store.forget(client);
      store.connections[client];
    }
  }
  int waiting = 0;
  for (const auto& [client, connection] : store.connections) waiting += !connection.awaited.empty();
  if (waiting != store.waiting()) std::abort();
  return 0;
}
