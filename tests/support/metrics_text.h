// Reading gputuned's Prometheus text in tests: its samples by series, and
// `promtool check metrics` (Debian's prometheus package) on it. For Catch2
// suites (malformed sample lines fail the test).
#ifndef GPUTUNE_TESTS_SUPPORT_METRICS_TEXT_H_
#define GPUTUNE_TESTS_SUPPORT_METRICS_TEXT_H_

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::testing {

// "name{labels}" -> value, for every sample line of a text.
inline std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    REQUIRE(space != absl::string_view::npos);
    double value = 0;
    if (line.substr(space + 1) == "+Inf") {
      value = HUGE_VAL;
    } else {
      REQUIRE(absl::SimpleAtod(line.substr(space + 1), &value));
    }
    out[std::string(line.substr(0, space))] = value;
  }
  return out;
}

// promtool's verdict on `text` (written to files in `dir`); empty when it is
// clean. Skips (with a warning, returning empty) when promtool is not
// installed.
inline std::string Promtool(const std::string& dir, const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    WARN("skipped promtool: not installed (apt-get install prometheus)");
    return "";
  }
  const std::string in = dir + "/check.prom", out = dir + "/promtool.out";
  std::ofstream(in) << text;
  const int rc = std::system(
      ("promtool check metrics < " + in + " > " + out + " 2>&1").c_str());
  const std::string said = ReadFile(out);
  return rc == 0 ? said : "promtool failed: " + said;
}

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_METRICS_TEXT_H_
