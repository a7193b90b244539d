#pragma once

#include <exception>
#include <string>

#include <gtest/gtest.h>

#include "pipeline/error.h"

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

}  // namespace ferry::testing
