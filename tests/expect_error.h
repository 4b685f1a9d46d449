// A GoogleTest helper shared by the suites: a call must throw tokpos::Error
// with a given status and message pieces.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "tokpos/error.h"

namespace tokpos::testing {

// Runs f, which must throw tokpos::Error with `status` and every piece in its message.
template <typename F>
void expect_error(F&& f, tokpos::Status status, std::initializer_list<std::string> pieces) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const tokpos::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    for (const auto& p : pieces) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

}  // namespace tokpos::testing
