#include "tools/launch/store_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "tools/launch/store_service.h"

namespace launch {
namespace {

// A client that does not read its answers is dropped before it holds more.
constexpr size_t kMaxUnreadBytes = size_t{2} << 30;

std::string address_text(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  int port = 0;
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof(text));
    port = ntohs(v6.sin6_port);
  } else {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof(text));
    port = ntohs(v4.sin_port);
  }
  return std::string(text) + ":" + std::to_string(port);
}

// A listening socket on every interface: IPv6 taking IPv4 too where the host
// has IPv6, as LibTorch's own server does; IPv4 alone otherwise.
int listen_on(int port) {
  int error = EAFNOSUPPORT;
  for (const int family : {AF_INET6, AF_INET}) {
    const int listener = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listener < 0) {
      error = errno;
      continue;
    }
    const int on = 1;
    const int off = 0;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    sockaddr_storage address{};
    socklen_t size = 0;
    if (family == AF_INET6) {
      setsockopt(listener, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
      auto& v6 = reinterpret_cast<sockaddr_in6&>(address);
      v6.sin6_family = AF_INET6;
      v6.sin6_port = htons(port);
      v6.sin6_addr = in6addr_any;
      size = sizeof(v6);
    } else {
      auto& v4 = reinterpret_cast<sockaddr_in&>(address);
      v4.sin_family = AF_INET;
      v4.sin_port = htons(port);
      v4.sin_addr.s_addr = htonl(INADDR_ANY);
      size = sizeof(v4);
    }
    if (bind(listener, reinterpret_cast<sockaddr*>(&address), size) == 0 &&
        listen(listener, SOMAXCONN) == 0) {
      return listener;
    }
    error = errno;
    close(listener);
    if (error == EADDRINUSE) break;
  }
  throw std::system_error(error, std::generic_category(),
                          "cannot listen on port " + std::to_string(port));
}

int port_of(int listener) {
  sockaddr_storage address{};
  socklen_t size = sizeof(address);
  getsockname(listener, reinterpret_cast<sockaddr*>(&address), &size);
  return address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6&>(address).sin6_port)
                                       : ntohs(reinterpret_cast<sockaddr_in&>(address).sin_port);
}

void accept_waiting(int listener, StoreService& service) {
  for (;;) {
    sockaddr_storage address{};
    socklen_t size = sizeof(address);
    const int socket = accept4(listener, reinterpret_cast<sockaddr*>(&address), &size,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (socket < 0) return;
    const int on = 1;
    setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    service.connections[socket].peer = address_text(address);
  }
}

// Reads what has arrived; false when the connection failed.
bool receive(int socket, StoreConnection& connection) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = recv(socket, buffer, sizeof(buffer), 0);
    if (got > 0) {
      connection.in.append(buffer, static_cast<size_t>(got));
    } else if (got == 0) {
      connection.ended = true;
      return true;
    } else {
      return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    }
  }
}

// Sends what the socket takes now; false when the connection failed.
bool send_pending(int socket, StoreConnection& connection) {
  while (!connection.out.empty()) {
    const ssize_t sent =
        send(socket, connection.out.data(), connection.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    connection.out.erase(0, static_cast<size_t>(sent));
  }
  return true;
}

void close_connection(StoreService& service, int socket, const std::string& why) {
  if (!why.empty()) {
    std::fprintf(stderr, "engine-launch: the job's store closed the connection from %s: %s\n",
                 service.connections.at(socket).peer.c_str(), why.c_str());
  }
  service.forget(socket);
  close(socket);
}

// Reads and serves one connection's requests; the reason to close it, if any.
std::optional<std::string> take_requests(StoreService& service, int socket) {
  StoreConnection& connection = service.connections.at(socket);
  if (!receive(socket, connection)) return std::string(std::strerror(errno));
  try {
    service.serve_arrived(socket);
  } catch (const Unservable& unservable) {
    return std::string(unservable.what());
  }
  if (connection.ended) return std::string();
  return std::nullopt;
}

}  // namespace

StoreServer::StoreServer(int port) : listener_(listen_on(port)), port_(port_of(listener_)) {
  if (pipe2(stop_pipe_, O_CLOEXEC) != 0) {
    close(listener_);
    throw std::system_error(errno, std::generic_category(), "cannot make the store's stop pipe");
  }
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  close(stop_pipe_[1]);
  thread_.join();
  close(stop_pipe_[0]);
  close(listener_);
}

void StoreServer::serve() {
  StoreService service;
  for (;;) {
    std::vector<pollfd> polled = {{listener_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    for (const auto& [socket, connection] : service.connections) {
      const short events = POLLIN | (connection.out.empty() ? 0 : POLLOUT);
      polled.push_back({socket, events, 0});
    }
    if (poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR) {
      std::perror("engine-launch: the job's store stopped: poll");
      break;
    }
    if (polled[1].revents != 0) break;
    if (polled[0].revents & POLLIN) accept_waiting(listener_, service);
    for (size_t at = 2; at < polled.size(); ++at) {
      if (polled[at].revents == 0) continue;
      const std::optional<std::string> why = take_requests(service, polled[at].fd);
      if (why) close_connection(service, polled[at].fd, *why);
    }
    waiting_ = service.waiting();
    // Answers go to other connections too: the waits and watches a request ended.
    std::vector<std::pair<int, std::string>> failed;
    for (auto& [socket, connection] : service.connections) {
      if (!send_pending(socket, connection)) {
        failed.emplace_back(socket, "");
      } else if (connection.out.size() > kMaxUnreadBytes) {
        failed.emplace_back(socket, "it left over 2 GiB of answers unread");
      }
    }
    for (const auto& [socket, why] : failed) close_connection(service, socket, why);
    waiting_ = service.waiting();
  }
  for (const auto& [socket, connection] : service.connections) close(socket);
}

}  // namespace launch
