#include "version/build_info.h"

#include "absl/strings/str_cat.h"

namespace gputune {
namespace build_info_generated {
// Defined in the file version/write_build_info.cmake generates.
extern const char kVersion[];
extern const char kRevision[];
extern const char kBackends[];
}  // namespace build_info_generated

absl::string_view BuildVersion() { return build_info_generated::kVersion; }
absl::string_view BuildRevision() { return build_info_generated::kRevision; }
absl::string_view BuildBackends() { return build_info_generated::kBackends; }

std::string VersionLine(absl::string_view program) {
  return absl::StrCat(program, " ", BuildVersion(), " (git ", BuildRevision(),
                      "; backends: ", BuildBackends(), ")");
}

}  // namespace gputune
