#pragma once

#include <exception>
#include <string>
#include <utility>

#include <gtest/gtest.h>

#include <ferry/pipeline/error.h>

namespace ferry::testing {

/// The message of the ferry::Error that `body` throws. Any other exception, or none, is a test
/// failure (its message, or "", is returned so that the caller's checks still run).
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a ferry::Error: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no ferry::Error";
  return "";
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

/// Passes when `body` throws a ferry::Error whose message contains `part`; a failure shows the
/// message (as error_of(), any other exception, or none, fails too).
template <typename Body>
::testing::AssertionResult error_names(Body&& body, const std::string& part) {
  const std::string text = error_of(std::forward<Body>(body));
  if (contains(text, part)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "the error does not name '" << part << "': " << text;
}

}  // namespace ferry::testing
