// What a gputune binary was built from: the project version, the git
// revision of the tree and the benchmark backends compiled in. Printed by
// `gputuned --version` and `gputunectl --version`.
#ifndef GPUTUNE_VERSION_BUILD_INFO_H_
#define GPUTUNE_VERSION_BUILD_INFO_H_

#include <string>

#include "absl/strings/string_view.h"

namespace gputune {

// The project version, e.g. "0.1.0" (CMake's PROJECT_VERSION).
absl::string_view BuildVersion();
// `git describe --always --dirty` of the tree at build time, e.g.
// "b36f154e1a2c-dirty"; "unknown" when built outside a git checkout.
absl::string_view BuildRevision();
// The backends compiled in, space-separated: "host", or "host cuda" when the
// CUDA module was built (whether it loads is decided at run time).
absl::string_view BuildBackends();
// "<program> <version> (git <revision>; backends: <backends>)".
std::string VersionLine(absl::string_view program);

}  // namespace gputune

#endif  // GPUTUNE_VERSION_BUILD_INFO_H_
