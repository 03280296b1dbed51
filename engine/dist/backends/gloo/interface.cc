#include "engine/dist/backends/gloo/interface.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <sstream>

#include "engine/dist/errors.h"

namespace engine::dist::gloo {
namespace {

std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) names.push_back(name);
  if (!list.empty() && list.back() == ',') names.push_back("");
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

// The first interface that is not loopback, for the examples in errors.
std::string example_interface(const Machine& machine) {
  for (const auto& name : machine.interfaces) {
    if (name != "lo") return name;
  }
  return "eth0";
}

[[noreturn]] void refuse(int rank, const std::string& what) {
  throw InvalidArgument(on_rank(rank, "gloo: " + what));
}

std::string checked_interface(const std::string& ifname, int rank, const Machine& machine) {
  const auto names = split_names(ifname);
  for (const auto& name : names) {
    if (!name.empty() && (name[0] == '^' || name[0] == '=')) {
      refuse(rank, "GLOO_SOCKET_IFNAME=" + ifname +
                       " uses NCCL's syntax (^ excludes, = matches exactly), which Gloo does "
                       "not know: name the interface to use, e.g. GLOO_SOCKET_IFNAME=" +
                       example_interface(machine));
    }
    if (name.empty()) {
      refuse(rank, "GLOO_SOCKET_IFNAME=" + ifname + " holds an empty interface name");
    }
    if (std::find(machine.interfaces.begin(), machine.interfaces.end(), name) ==
        machine.interfaces.end()) {
      refuse(rank, "GLOO_SOCKET_IFNAME names " + name + ", which this machine (" +
                       machine.hostname +
                       ") does not have; its interfaces: " + joined(machine.interfaces));
    }
  }
  return names.front();
}

}  // namespace

bool is_loopback(const std::string& host) {
  return host.empty() || host == "localhost" || host.rfind("127.", 0) == 0;
}

Machine this_machine() {
  Machine machine;
  if (auto* list = if_nameindex()) {
    for (auto* entry = list; entry->if_index != 0; ++entry) {
      machine.interfaces.push_back(entry->if_name);
    }
    if_freenameindex(list);
  }
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  machine.hostname = name;
  machine.hostname_address = [hostname = machine.hostname]() -> std::string {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* found = nullptr;
    if (getaddrinfo(hostname.c_str(), nullptr, &hints, &found) != 0 || !found) return "";
    std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
    char text[INET_ADDRSTRLEN] = {};
    const auto* address = reinterpret_cast<const sockaddr_in*>(found->ai_addr);
    inet_ntop(AF_INET, &address->sin_addr, text, sizeof(text));
    return text;
  };
  return machine;
}

Endpoint choose_endpoint(const std::string& master_addr, const char* ifname, bool spans_machines,
                         int rank, const Machine& machine) {
  if (is_loopback(master_addr)) return {"127.0.0.1", ""};
  if (ifname != nullptr && *ifname != '\0') return {"", checked_interface(ifname, rank, machine)};
  const std::string address = machine.hostname_address();
  if (spans_machines && is_loopback(address)) {
    refuse(rank, "this machine's name (" + machine.hostname + ") resolves to " + address +
                     ", a loopback address that the job's other machines cannot reach (Debian's "
                     "/etc/hosts maps the hostname to 127.0.1.1); set GLOO_SOCKET_IFNAME to "
                     "the interface that reaches MASTER_ADDR (" +
                     master_addr + "); this machine's interfaces: " + joined(machine.interfaces));
  }
  return {address.empty() ? machine.hostname : address, ""};
}

}  // namespace engine::dist::gloo
