#include "engine/dist/backends/gloo/interface.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "engine/dist/errors.h"

namespace engine::dist::gloo {
namespace {

// A machine with loopback and one NIC, whose hostname resolves to `address`.
Machine machine_resolving_to(const std::string& address) {
  return {{"lo", "eth0", "eth1"}, "node7", [address] { return address; }};
}

std::string refusal(const std::string& master, const char* ifname, bool spans,
                    const std::string& address = "10.1.0.7") {
  try {
    choose_endpoint(master, ifname, spans, /*rank=*/3, machine_resolving_to(address));
  } catch (const InvalidArgument& error) {
    return error.what();
  }
  return "accepted";
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "\"" << part << "\" not in: " << text;
}

TEST(ChooseEndpointTest, ALoopbackMasterKeepsTheJobOnLoopback) {
  const auto endpoint = choose_endpoint("127.0.0.1", "eth0", false, 0, machine_resolving_to("x"));
  EXPECT_EQ(endpoint.hostname, "127.0.0.1");
  EXPECT_EQ(endpoint.interface, "");
}

TEST(ChooseEndpointTest, GlooSocketIfnameNamesTheInterfaceTheFirstOfAList) {
  const Machine machine = machine_resolving_to("127.0.1.1");
  EXPECT_EQ(choose_endpoint("10.1.0.1", "eth0", true, 0, machine).interface, "eth0");
  const auto endpoint = choose_endpoint("10.1.0.1", "eth1,eth0", true, 0, machine);
  EXPECT_EQ(endpoint.interface, "eth1");
  EXPECT_EQ(endpoint.hostname, "");
}

TEST(ChooseEndpointTest, NcclsSyntaxIsRefusedWithWhatToSet) {
  for (const char* ifname : {"^lo", "^docker,lo", "=eth0", "eth0,^lo"}) {
    const std::string error = refusal("10.1.0.1", ifname, true);
    expect_contains(error, "rank 3");
    expect_contains(error, std::string("GLOO_SOCKET_IFNAME=") + ifname);
    expect_contains(error, "NCCL's syntax");
    expect_contains(error, "e.g. GLOO_SOCKET_IFNAME=eth0");
  }
}

TEST(ChooseEndpointTest, AnInterfaceThisMachineLacksIsNamedWithTheOnesItHas) {
  const std::string error = refusal("10.1.0.1", "eth0,ib0", true);
  expect_contains(error, "names ib0, which this machine (node7) does not have");
  expect_contains(error, "its interfaces: lo, eth0, eth1");
  expect_contains(refusal("10.1.0.1", "eth0,", true), "empty interface name");
}

TEST(ChooseEndpointTest, ALoopbackHostnameAddressIsRefusedOnlyAcrossMachines) {
  const std::string error = refusal("10.1.0.1", nullptr, /*spans=*/true, "127.0.1.1");
  expect_contains(error, "rank 3");
  expect_contains(error, "(node7) resolves to 127.0.1.1");
  expect_contains(error,
                  "set GLOO_SOCKET_IFNAME to the interface that reaches MASTER_ADDR (10.1.0.1)");
  EXPECT_EQ(refusal("10.1.0.1", "", true, "127.0.1.1"), error) << "an empty variable is unset";
  // On one machine the loopback address reaches every rank.
  EXPECT_EQ(
      choose_endpoint("10.1.0.1", nullptr, false, 0, machine_resolving_to("127.0.1.1")).hostname,
      "127.0.1.1");
  EXPECT_EQ(
      choose_endpoint("10.1.0.1", nullptr, true, 0, machine_resolving_to("10.1.0.7")).hostname,
      "10.1.0.7");
}

TEST(ThisMachineTest, ListsLoopbackAndNamesItself) {
  const Machine machine = this_machine();
  EXPECT_NE(std::find(machine.interfaces.begin(), machine.interfaces.end(), "lo"),
            machine.interfaces.end());
  EXPECT_FALSE(machine.hostname.empty());
}

}  // namespace
}  // namespace engine::dist::gloo
