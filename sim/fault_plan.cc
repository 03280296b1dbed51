#include "sim/fault_plan.h"

#include <random>
#include <regex>

namespace sim {
namespace {

const char* kind_name(Fault::Kind kind) {
  switch (kind) {
    case Fault::Kind::kCrash:
      return "crash";
    case Fault::Kind::kDelay:
      return "delay";
    case Fault::Kind::kNeverArrive:
      return "never";
    case Fault::Kind::kGarble:
      return "garble";
  }
  return "?";
}

Fault parse_fault(const std::string& text) {
  // Digit counts that std::stoi and std::stoull can always read.
  static const std::regex pattern(
      R"((crash|delay|never|garble):(\d{1,9})@(\d{1,18})(?:\+(\d{1,9})ms)?)");
  std::smatch match;
  if (!std::regex_match(text, match, pattern) || std::stoull(match[3]) == 0 ||
      (match[1] == "delay") != match[4].matched) {
    throw std::invalid_argument(
        "fault plan: cannot read \"" + text +
        "\"; write kind:rank@call with kind crash, delay, never or garble, calls counted from 1 "
        "(ranks and delays up to 9 digits, calls up to 18), and a delay's length as +<ms>ms, "
        "for example crash:2@5,delay:1@3+200ms,never:0@7");
  }
  Fault fault;
  fault.kind = match[1] == "crash"   ? Fault::Kind::kCrash
               : match[1] == "delay" ? Fault::Kind::kDelay
               : match[1] == "never" ? Fault::Kind::kNeverArrive
                                     : Fault::Kind::kGarble;
  fault.rank = std::stoi(match[2]);
  fault.call = std::stoull(match[3]);
  if (match[4].matched) fault.delay = std::chrono::milliseconds(std::stoll(match[4]));
  return fault;
}

}  // namespace

bool Fault::operator==(const Fault& other) const {
  return kind == other.kind && rank == other.rank && call == other.call && delay == other.delay;
}

std::string FaultPlan::to_string() const {
  std::string out;
  for (const auto& f : faults) {
    if (!out.empty()) out += ",";
    out += std::string(kind_name(f.kind)) + ":" + std::to_string(f.rank) + "@" +
           std::to_string(f.call);
    if (f.kind == Fault::Kind::kDelay) out += "+" + std::to_string(f.delay.count()) + "ms";
  }
  return out;
}

const Fault* FaultPlan::find(int rank, uint64_t call) const {
  for (const auto& f : faults) {
    if (f.rank == rank && f.call == call) return &f;
  }
  return nullptr;
}

bool FaultPlan::stops_a_rank() const {
  for (const auto& f : faults) {
    if (f.kind != Fault::Kind::kDelay) return true;
  }
  return false;
}

FaultPlan FaultPlan::parse(const std::string& text) {
  FaultPlan plan;
  if (text.empty()) return plan;
  size_t begin = 0;
  for (;;) {
    const size_t end = text.find(',', begin);
    plan.faults.push_back(parse_fault(text.substr(begin, end - begin)));
    if (end == std::string::npos) return plan;
    begin = end + 1;
  }
}

FaultPlan FaultPlan::swarm(uint64_t seed, int world_size, uint64_t max_call,
                           std::chrono::milliseconds max_delay) {
  std::mt19937_64 rng(seed);
  auto draw = [&](uint64_t low, uint64_t high) {
    return std::uniform_int_distribution<uint64_t>(low, high)(rng);
  };
  FaultPlan plan;
  for (const auto kind : {Fault::Kind::kDelay, Fault::Kind::kCrash, Fault::Kind::kNeverArrive}) {
    if (draw(0, 1) == 0) continue;
    for (uint64_t n = draw(1, 2); n > 0; --n) {
      Fault fault;
      fault.kind = kind;
      fault.rank = static_cast<int>(draw(0, world_size - 1));
      fault.call = draw(1, max_call);
      if (kind == Fault::Kind::kDelay) {
        fault.delay = std::chrono::milliseconds(draw(1, max_delay.count()));
      }
      if (!plan.find(fault.rank, fault.call)) plan.faults.push_back(fault);
    }
  }
  return plan;
}

}  // namespace sim
