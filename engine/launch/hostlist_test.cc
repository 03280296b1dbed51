#include "engine/launch/hostlist.h"

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "engine/dist/errors.h"

namespace engine::dist {
namespace {

using Hosts = std::vector<std::string>;

TEST(ExpandHostlist, RangesPaddingCommasAndSeveralGroups) {
  EXPECT_EQ(expand_hostlist("node[01-04,07]"),
            (Hosts{"node01", "node02", "node03", "node04", "node07"}));
  EXPECT_EQ(expand_hostlist("a1,b[8-10] c"), (Hosts{"a1", "b8", "b9", "b10", "c"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[09-10]"), (Hosts{"r1n09", "r1n10", "r2n09", "r2n10"}));
  EXPECT_EQ(expand_hostlist("gpu-node-3"), (Hosts{"gpu-node-3"}));
}

TEST(ExpandHostlist, MalformedListsNameTheVariableAndTheProblem) {
  for (const std::string bad :
       {"node[1-", "node]1", "node[3-1]", "node[a-b]", "node[]", "", "n[1--2]"}) {
    try {
      expand_hostlist(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("SLURM_NODELIST='" + bad + "' is malformed"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(ExpandHostlist, AListOfMoreThankMaxHostsIsRefusedBeforeItIsBuilt) {
  const std::string too_many = "a[0-99999]b[0-99999]c[0-99999]";
  const std::string many = "a[0-999]b[0-999],c";  // kMaxHosts is 1048576
  EXPECT_EQ(expand_hostlist(many).size(), 1000001u);
  for (const auto& [bad, variable, expand] :
       std::vector<std::tuple<std::string, std::string, std::function<void(const std::string&)>>>{
           {too_many, "SLURM_NODELIST", [](const std::string& v) { expand_hostlist(v); }},
           {many + ",d[0-99999]", "SLURM_NODELIST",
            [](const std::string& v) { expand_hostlist(v); }},
           {"1(x999999),2(x999999)", "SLURM_TASKS_PER_NODE",
            [](const std::string& v) { expand_tasks_per_node(v); }}}) {
    try {
      expand(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()), variable + "='" + bad +
                                           "' is malformed: it expands to more than 1048576 "
                                           "entries; expected a list like node[01-04,07],gpu3");
    }
  }
}

// A random list of hosts written in Slurm's compressed form expands back to it.
RC_GTEST_PROP(ExpandHostlist, CompressedFormExpandsToTheHosts, ()) {
  const int groups = *rc::gen::inRange(1, 4);
  Hosts expected;
  std::string list;
  for (int g = 0; g < groups; ++g) {
    const std::string prefix =
        "n" + std::to_string(g) + *rc::gen::element<std::string>("", "x", "-rack");
    const int width = *rc::gen::inRange(1, 4);
    std::string ranges;
    int next = *rc::gen::inRange(0, 20);
    for (int r = *rc::gen::inRange(1, 4); r > 0; --r) {
      const int first = next;
      const int last = first + *rc::gen::inRange(0, 5);
      auto pad = [&](int n) {
        std::string s = std::to_string(n);
        return std::string(std::max(0, width - static_cast<int>(s.size())), '0') + s;
      };
      ranges += (ranges.empty() ? "" : ",") + pad(first) + (last > first ? "-" + pad(last) : "");
      for (int n = first; n <= last; ++n) expected.push_back(prefix + pad(n));
      next = last + 1 + *rc::gen::inRange(0, 3);
    }
    list += (list.empty() ? "" : ",") + prefix + "[" + ranges + "]";
  }
  RC_ASSERT(expand_hostlist(list) == expected);
}

TEST(ExpandTasksPerNode, RepeatsAndSingles) {
  EXPECT_EQ(expand_tasks_per_node("4(x2),1"), (std::vector<int>{4, 4, 1}));
  EXPECT_EQ(expand_tasks_per_node("8"), (std::vector<int>{8}));
  EXPECT_THROW(expand_tasks_per_node("4(x2"), InvalidArgument);
  EXPECT_THROW(expand_tasks_per_node("four"), InvalidArgument);
}

}  // namespace
}  // namespace engine::dist
