#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

namespace ferry {

/// Where in the pipeline something went wrong. Every part is optional: a config problem has no
/// sample, a collate problem has a batch but no single sample.
struct ErrorContext {
  std::string stage;               // "decode", "collate", "pack", "h2d", "event-wait", "source"
  std::optional<uint64_t> sample;  // the sample's index in its source
  std::optional<uint64_t> epoch;
  std::optional<uint64_t> batch;  // batch index within its epoch
};

/// The exception ferry throws for everything a user must hear about. Its message names the stage,
/// the sample and the batch, then the cause, e.g.
///
///   ferry: decode failed on sample 1234 (epoch 0, batch 38): field 'image': ...
///
/// so that the bad input can be found without a debugger. Copyable: errors travel through the
/// pipeline in-band, in delivery order, and are rethrown on the consumer's thread.
class Error : public std::runtime_error {
 public:
  explicit Error(std::string cause) : Error(ErrorContext{}, std::move(cause)) {}
  Error(ErrorContext where, std::string cause);

  const std::string& stage() const noexcept { return where_.stage; }
  const std::string& cause() const noexcept { return cause_; }
  std::optional<uint64_t> sample_index() const noexcept { return where_.sample; }
  std::optional<uint64_t> epoch() const noexcept { return where_.epoch; }
  std::optional<uint64_t> batch_index() const noexcept { return where_.batch; }
  const ErrorContext& context() const noexcept { return where_; }

  /// The same cause, placed: parts of `where` fill the parts this error does not know yet.
  Error placed(const ErrorContext& where) const;

 private:
  ErrorContext where_;
  std::string cause_;
};

/// What `failure` says, for a message that places it itself: a ferry::Error's cause, a libtorch error
/// without its C++ backtrace (many lines that say nothing about the data), any other exception's what().
std::string cause_of(const std::exception& failure);
std::string cause_of(const std::exception_ptr& failure);

/// `failure` as a ferry::Error at `where`: a ferry::Error keeps its own context (`where` fills the parts
/// it lacks); any other exception becomes the cause (cause_of()). For code that catches everything and
/// must report it in-band, placed.
Error error_from(const std::exception_ptr& failure, const ErrorContext& where);

}  // namespace ferry
