#include "tools/launch/store_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "tools/launch/store_service.h"

namespace launch {
namespace {

using std::chrono::milliseconds;
using Bytes = std::vector<uint8_t>;

Bytes bytes(const std::string& text) { return {text.begin(), text.end()}; }

// LibTorch's own client, as the launchers and the ranks join the store.
c10::intrusive_ptr<c10d::TCPStore> client_of(const StoreServer& server,
                                             milliseconds timeout = milliseconds(20000)) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(server.port());
  options.isServer = false;
  options.waitWorkers = false;
  options.timeout = timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", options);
  // LibTorch 1.13's client bounds every receive by its last wait's timeout,
  // and by nothing before one: so a server that stopped fails the test
  // instead of hanging it.
  store->wait({}, timeout);
  return store;
}

// A connection that sends what the test says, byte for byte.
class RawClient {
 public:
  explicit RawClient(const StoreServer& server) : socket_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in address{.sin_family = AF_INET,
                        .sin_port = htons(static_cast<uint16_t>(server.port())),
                        .sin_addr = {htonl(INADDR_LOOPBACK)}};
    EXPECT_EQ(connect(socket_, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    const timeval bound{.tv_sec = 20, .tv_usec = 0};
    setsockopt(socket_, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof(bound));
  }
  ~RawClient() { close(socket_); }

  void send_bytes(const std::string& data) {
    ASSERT_EQ(send(socket_, data.data(), data.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(data.size()));
  }
  // The next 8 bytes as a number; nullopt when the server closed the connection.
  std::optional<int64_t> receive_number() {
    int64_t number = 0;
    if (recv(socket_, &number, sizeof(number), MSG_WAITALL) != sizeof(number)) return std::nullopt;
    return number;
  }
  bool closed_by_server() {
    char byte = 0;
    return recv(socket_, &byte, 1, 0) == 0;
  }

 private:
  int socket_;
};

std::string field(uint64_t size) { return std::string(reinterpret_cast<char*>(&size), 8); }
std::string text_field(const std::string& text) { return field(text.size()) + text; }
std::string number_field(int64_t number) {
  return std::string(reinterpret_cast<char*>(&number), sizeof(number));
}
// Whether a connection waits for keys within 20 s.
bool comes_to_wait(const StoreServer& server) {
  const auto bound = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (server.waiting() == 0) {
    if (std::chrono::steady_clock::now() > bound) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

// LibTorch 1.13's request types; its client puts "/" before every key.
constexpr char kGet = 2;
constexpr char kAdd = 3;
constexpr char kWait = 5;

TEST(StoreServer, AnswersEveryRequestOfLibTorchsClientAsLibTorchsServerDoes) {
  const StoreServer server(0);
  const auto store = client_of(server);
  store->set("a", bytes("x"));
  EXPECT_EQ(store->get("a"), bytes("x"));
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->add("n", -7), -2);
  EXPECT_EQ(store->get("n"), bytes("-2"));
  // compare_set: absent and expected empty creates; absent and expected set
  // answers the expected value and creates nothing; present swaps only on a match.
  EXPECT_EQ(store->compareSet("c", {}, bytes("1")), bytes("1"));
  EXPECT_EQ(store->compareSet("d", bytes("e"), bytes("f")), bytes("e"));
  EXPECT_FALSE(store->check({"d"}));
  EXPECT_EQ(store->compareSet("c", bytes("0"), bytes("2")), bytes("1"));
  EXPECT_EQ(store->compareSet("c", bytes("1"), bytes("2")), bytes("2"));
  EXPECT_TRUE(store->check({"a", "n", "c"}));
  EXPECT_FALSE(store->check({"a", "absent"}));
  EXPECT_EQ(store->getNumKeys(), 3);
  EXPECT_TRUE(store->deleteKey("a"));
  EXPECT_FALSE(store->deleteKey("a"));
  EXPECT_EQ(store->getNumKeys(), 2);
  store->set("empty", {});
  EXPECT_EQ(store->get("empty"), Bytes{});
  store->wait({"n", "c"}, milliseconds(1000));
}

TEST(StoreServer, ASetAnAddOrACompareSetByAnotherClientEndsAWait) {
  const StoreServer server(0);
  const auto waiter = client_of(server);
  const auto writer = client_of(server);
  bool woken = false;
  std::thread waiting([&] {
    try {
      waiter->wait({"set", "added", "created"}, milliseconds(20000));
      woken = true;
    } catch (const std::exception&) {
    }
  });
  ASSERT_TRUE(comes_to_wait(server));
  writer->set("set", bytes("1"));
  writer->add("added", 1);
  EXPECT_EQ(server.waiting(), 1);
  writer->compareSet("created", {}, bytes("1"));
  waiting.join();
  EXPECT_TRUE(woken);
  EXPECT_EQ(server.waiting(), 0);
}

TEST(StoreServer, AClientCutOffMidRequestDelaysNoOther) {
  const StoreServer server(0);
  RawClient type_only(server);
  type_only.send_bytes(std::string(1, kAdd));
  RawClient half_key(server);
  half_key.send_bytes(std::string(1, kAdd) + field(6) + "/cou");
  RawClient silent(server);
  const auto store = client_of(server, milliseconds(10000));
  EXPECT_EQ(store->add("count", 1), 1);
  // The cut-off request is served once the rest of it arrives.
  half_key.send_bytes("nt" + number_field(2));
  EXPECT_EQ(half_key.receive_number(), 3);
  EXPECT_EQ(store->add("count", 0), 3);
}

TEST(StoreServer, ARequestItCannotServeClosesThatConnectionAlone) {
  const StoreServer server(0);
  const auto store = client_of(server);
  store->set("text", bytes("not a number"));
  store->add("big", std::numeric_limits<int64_t>::max());
  const std::vector<std::string> unservable = {
      std::string(1, 42),                                            // no such request type
      std::string(1, kAdd) + field(uint64_t{1} << 40),               // a key of 1 TiB
      std::string(1, kAdd) + text_field("/text") + number_field(1),  // add to a non-number
      std::string(1, kAdd) + text_field("/big") + number_field(1),   // a sum over 64 bits
      std::string(1, kGet) + text_field("absent"),                   // get of a key not set
  };
  for (const std::string& request : unservable) {
    RawClient raw(server);
    raw.send_bytes(request);
    EXPECT_TRUE(raw.closed_by_server()) << "request type " << int(request[0]);
  }
  EXPECT_EQ(store->add("count", 1), 1);
  EXPECT_EQ(store->get("text"), bytes("not a number"));
}

TEST(StoreService, SaysThatAClientOfLibTorch2CannotJoin) {
  // What torch 2.14.1's TCPStore client sends first: VALIDATE and its magic
  // number, then PING and a nonce.
  const std::string handshake("\x00\xce\xf7\x85\x3c\x0d\x83\x4c\x00\x00", 10);
  StoreService store;
  store.connections[3].in = handshake;
  try {
    store.serve_arrived(3);
    FAIL() << "served LibTorch 2.x's handshake";
  } catch (const Unservable& unservable) {
    EXPECT_NE(std::string(unservable.what()).find("a client of LibTorch 2.x"), std::string::npos)
        << unservable.what();
  }
  const StoreServer server(0);
  RawClient raw(server);
  raw.send_bytes(handshake);
  EXPECT_TRUE(raw.closed_by_server());
}

TEST(StoreServer, AWaitTheClientGaveUpOnDoesNotAnswerItsNextRequest) {
  const StoreServer server(0);
  const auto waiter = client_of(server);
  const auto writer = client_of(server);
  EXPECT_THROW(waiter->wait({"late"}, milliseconds(100)), std::exception);
  // LibTorch 1.13's server would answer the wait when "late" is set, and the
  // client would read that byte as check's answer: 0, ready.
  EXPECT_FALSE(waiter->check({"absent"}));
  writer->set("late", bytes("1"));
  ASSERT_TRUE(writer->check({"late"}));  // the set has been served
  EXPECT_FALSE(waiter->check({"absent"}));
  EXPECT_EQ(server.waiting(), 0);
}

TEST(StoreServer, TheWaitsOfAClosedConnectionAreForgotten) {
  const StoreServer server(0);
  const auto writer = client_of(server);
  {
    RawClient raw(server);
    raw.send_bytes(std::string(1, kWait) + field(1) + text_field("key"));
    ASSERT_TRUE(comes_to_wait(server));
  }
  writer->set("key", bytes("1"));
  EXPECT_EQ(writer->add("count", 1), 1);
  EXPECT_EQ(server.waiting(), 0);
}

TEST(StoreServer, TellsTheWatchersOfAKeyOfEveryChange) {
  const StoreServer server(0);
  const auto watcher = client_of(server);
  const auto writer = client_of(server);
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::string> seen;
  watcher->watchKey("key",
                    [&](c10::optional<std::string> before, c10::optional<std::string> after) {
                      const std::lock_guard<std::mutex> lock(mutex);
                      seen.push_back(before.value_or("none") + "->" + after.value_or("none"));
                      changed.notify_all();
                    });
  writer->set("key", bytes("1"));
  writer->add("key", 1);
  writer->compareSet("key", bytes("2"), bytes("3"));
  writer->deleteKey("key");
  std::unique_lock<std::mutex> lock(mutex);
  ASSERT_TRUE(changed.wait_for(lock, std::chrono::seconds(20), [&] { return seen.size() == 4; }));
  EXPECT_EQ(seen, (std::vector<std::string>{"none->1", "1->2", "2->3", "3->none"}));
}

TEST(StoreServer, SaysWhichPortItCannotListenOn) {
  const StoreServer server(0);
  try {
    const StoreServer second(server.port());
    FAIL() << "a second server listened on port " << server.port();
  } catch (const std::system_error& error) {
    EXPECT_NE(std::string(error.what()).find("port " + std::to_string(server.port())),
              std::string::npos)
        << error.what();
    EXPECT_EQ(error.code().value(), EADDRINUSE);
  }
}

}  // namespace
}  // namespace launch
