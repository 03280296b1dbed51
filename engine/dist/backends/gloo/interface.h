#pragma once

#include <functional>
#include <string>
#include <vector>

// Where a rank of the gloo backend connects from, and so the address it
// advertises to its peers, by PyTorch's rules with their traps named:
//   - MASTER_ADDR on loopback: 127.0.0.1 (the whole job is on this machine);
//   - else GLOO_SOCKET_IFNAME: interface names, comma-separated, each one
//     this machine has; the backend connects over the first (PyTorch spreads
//     its connections over all of them);
//   - else the address this machine's hostname resolves to, which must not
//     be a loopback one when the job spans machines (Debian's /etc/hosts maps
//     the hostname to 127.0.1.1): no other machine could reach it, and the
//     job would wait for its timeout.
namespace engine::dist::gloo {

struct Endpoint {
  std::string hostname;   // an address to bind to, or
  std::string interface;  // an interface whose address to bind to
};

struct Machine {
  std::vector<std::string> interfaces;            // this machine's, by name
  std::string hostname;                           // gethostname()
  std::function<std::string()> hostname_address;  // what it resolves to
};

// This machine, as the operating system describes it.
Machine this_machine();

// Throws dist::InvalidArgument naming `rank`, what was wrong and what to
// set: NCCL's exclusion syntax ("^lo", "=eth0") in GLOO_SOCKET_IFNAME, an
// interface this machine lacks, an empty name, or a loopback hostname
// address in a job that spans machines. `ifname` is GLOO_SOCKET_IFNAME
// (nullptr or empty: unset).
Endpoint choose_endpoint(const std::string& master_addr, const char* ifname, bool spans_machines,
                         int rank, const Machine& machine);

bool is_loopback(const std::string& host);

}  // namespace engine::dist::gloo
