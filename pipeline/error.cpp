#include "ferry/pipeline/error.h"

#include <sstream>

#include <c10/util/Exception.h>

namespace ferry {
namespace {

std::string describe(const ErrorContext& where, const std::string& cause) {
  std::ostringstream out;
  out << "ferry: ";
  if (!where.stage.empty()) out << where.stage << " failed";
  if (where.sample) out << " on sample " << *where.sample;
  if (where.epoch || where.batch) {
    out << (where.sample ? " (" : " in ");
    if (where.epoch) out << "epoch " << *where.epoch;
    if (where.epoch && where.batch) out << ", ";
    if (where.batch) out << "batch " << *where.batch;
    if (where.sample) out << ")";
  }
  if (!where.stage.empty() || where.sample || where.epoch || where.batch) out << ": ";
  out << cause;
  return out.str();
}

}  // namespace

Error::Error(ErrorContext where, std::string cause)
    : std::runtime_error(describe(where, cause)), where_(std::move(where)), cause_(std::move(cause)) {}

Error Error::placed(const ErrorContext& where) const {
  ErrorContext merged = where_;
  if (merged.stage.empty()) merged.stage = where.stage;
  if (!merged.sample) merged.sample = where.sample;
  if (!merged.epoch) merged.epoch = where.epoch;
  if (!merged.batch) merged.batch = where.batch;
  return Error(std::move(merged), cause_);
}

std::string cause_of(const std::exception& failure) {
  if (const auto* error = dynamic_cast<const Error*>(&failure)) return error->cause();
  if (const auto* error = dynamic_cast<const c10::Error*>(&failure)) return error->what_without_backtrace();
  return failure.what();
}

std::string cause_of(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const std::exception& e) {
    return cause_of(e);
  } catch (...) {
    return "unknown exception";
  }
}

Error error_from(const std::exception_ptr& failure, const ErrorContext& where) {
  try {
    std::rethrow_exception(failure);
  } catch (const Error& e) {
    return e.placed(where);
  } catch (...) {
    return Error(where, cause_of(std::current_exception()));
  }
}

}  // namespace ferry
