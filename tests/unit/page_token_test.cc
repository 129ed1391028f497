// ListEntries page tokens: what the daemon makes reads back; nothing else
// does.
#include "daemon/page_token.h"

#include <string>

#include "tests/support/catch.h"

namespace gputune {

TEST_CASE("a page token reads back as the key id it was made from") {
  for (const std::string& id :
       {std::string("dense_bf16/decode/r/m=1/k=8/n=8@c"),
        std::string(1400, 'k'), std::string("with\0nul", 8)}) {
    absl::StatusOr<std::string> back = DecodePageToken(EncodePageToken(id));
    REQUIRE(back.ok());
    CHECK(*back == id);
    CHECK(EncodePageToken(id).size() <= kMaxPageTokenLength);
  }
  CHECK(DecodePageToken("")->empty());  // the first page
}

TEST_CASE("forged, damaged, foreign and oversized page tokens are refused") {
  std::string damaged = EncodePageToken("dense_bf16/decode/r/m=1/k=8/n=8@c");
  damaged[5] = damaged[5] == 'A' ? 'B' : 'A';
  for (const std::string& token :
       {std::string("dense_bf16/decode/r/m=1/k=8/n=8@c"),
        std::string("' OR 1=1 --"), std::string("1!!!!"), std::string("1AAA"),
        std::string("2") + EncodePageToken("x").substr(1), damaged,
        std::string(kMaxPageTokenLength + 1, '1')}) {
    absl::StatusOr<std::string> s = DecodePageToken(token);
    INFO(token.substr(0, 40));
    REQUIRE_FALSE(s.ok());
    CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.status().message()).rfind("page_token", 0) == 0);
  }
}

}  // namespace gputune
