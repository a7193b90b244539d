#include <ferry/io/util/printable.h>

#include <gtest/gtest.h>

namespace ferry {
namespace {

TEST(Printable, EscapesWhatAMessageCannotShowAndCutsLongText) {
  EXPECT_EQ(printable("abc 123", 10), "abc 123");
  EXPECT_EQ(printable(std::string_view("a\0b\n\x93\\", 6), 10), "a\\x00b\\x0a\\x93\\x5c");
  EXPECT_EQ(printable("it's", 10), "it\\x27s");                      // the default quote
  EXPECT_EQ(printable("it's \"x\"", 10, "\""), "it's \\x22x\\x22");  // another quote
  EXPECT_EQ(printable("it's", 10, ""), "it's");
  EXPECT_EQ(printable("abcdef", 3), "abc...");
  EXPECT_EQ(printable("abc", 3), "abc");
  EXPECT_EQ(printable("", 3), "");
}

}  // namespace
}  // namespace ferry
