#include "ferry/pipeline/fault_injection.h"

#include <array>

namespace ferry {
namespace {

struct Plan {
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> first{0};
  std::atomic<uint64_t> end{0};
  std::atomic<uint64_t> fired{0};
};

std::array<Plan, static_cast<size_t>(Fault::kCount)> g_plans;

Plan& plan_of(Fault fault) { return g_plans[static_cast<size_t>(fault)]; }

}  // namespace

namespace detail {
std::atomic<uint32_t> g_armed_faults{0};

bool fault_fires_armed(Fault fault) noexcept {
  Plan& plan = plan_of(fault);
  const uint64_t call = plan.calls.fetch_add(1, std::memory_order_relaxed);
  const uint64_t end = plan.end.load(std::memory_order_relaxed);
  if (call >= end) {
    g_armed_faults.fetch_and(~(1u << static_cast<uint32_t>(fault)), std::memory_order_relaxed);
    return false;
  }
  if (call < plan.first.load(std::memory_order_relaxed)) return false;
  plan.fired.fetch_add(1, std::memory_order_relaxed);
  return true;
}
}  // namespace detail

std::string_view fault_name(Fault fault) noexcept {
  switch (fault) {
    case Fault::kStagingAllocation: return "staging allocation";
    case Fault::kTransferCopy: return "transfer copy";
    case Fault::kEventRecord: return "event record";
    case Fault::kEventQuery: return "event query";
    case Fault::kCount: break;
  }
  return "?";
}

void FaultInjector::arm(Fault fault, uint64_t after, uint64_t times) noexcept {
  Plan& plan = plan_of(fault);
  const uint32_t bit = 1u << static_cast<uint32_t>(fault);
  detail::g_armed_faults.fetch_and(~bit, std::memory_order_seq_cst);
  plan.calls.store(0, std::memory_order_relaxed);
  plan.fired.store(0, std::memory_order_relaxed);
  plan.first.store(after, std::memory_order_relaxed);
  plan.end.store(after + times, std::memory_order_relaxed);
  detail::g_armed_faults.fetch_or(bit, std::memory_order_seq_cst);  // publishes the plan
}

void FaultInjector::reset() noexcept {
  detail::g_armed_faults.store(0, std::memory_order_seq_cst);
  for (Plan& plan : g_plans) {
    plan.calls.store(0, std::memory_order_relaxed);
    plan.fired.store(0, std::memory_order_relaxed);
    plan.first.store(0, std::memory_order_relaxed);
    plan.end.store(0, std::memory_order_relaxed);
  }
}

uint64_t FaultInjector::fired(Fault fault) noexcept { return plan_of(fault).fired.load(std::memory_order_relaxed); }

}  // namespace ferry
