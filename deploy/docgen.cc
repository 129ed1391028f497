// gputune_docgen OUTDIR: writes what the packages install from the same
// text the binaries print: gputunectl.1 and the bash completion from
// gputunectl's help table (client/gputunectl/cli.cc), gputuned.8 from
// `gputuned --help` (daemon/config.cc). Run by the build; not installed.
#include <fstream>
#include <iostream>
#include <string>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/gputunectl/cli.h"
#include "daemon/config.h"

namespace {

// gputuned.8: every flag of ConfigHelp() (--help, --version and the
// settings: "  --name" then its indented help) as a tagged paragraph.
std::string GputunedPage() {
  std::string out =
      ".\\\" Generated from gputuned --help (daemon/config.cc).\n"
      ".TH GPUTUNED 8 \"\" \"gputune\" \"gputune manual\"\n"
      ".SH NAME\ngputuned \\- the per\\-GPU kernel tuning daemon\n"
      ".SH SYNOPSIS\n.B gputuned\n[\\fB\\-\\-name=value\\fR ...]\n.br\n"
      ".B gputuned \\-\\-version\n"
      ".SH DESCRIPTION\ngputuned keeps one authoritative kernel tuning cache "
      "per GPU and decides, for every key, who benchmarks it. One instance "
      "serves one device; systemd runs one per GPU as gputuned@N. Clients "
      "(libgputune, gputunectl) talk to it over a unix socket.\n"
      ".PP\nEvery setting is also accepted as a \\fIname = value\\fR line in "
      "the file given with \\-\\-config (the package ships "
      "/etc/gputune/gputuned.conf).\n.SH OPTIONS\n";
  for (absl::string_view line : absl::StrSplit(gputune::ConfigHelp(), '\n')) {
    if (absl::StartsWith(line, "  --")) {
      absl::StrAppend(
          &out, ".TP\n.B ",
          gputune::ctl::RoffEscape(absl::StripAsciiWhitespace(line)), "\n");
    } else if (absl::StartsWith(line, "      ")) {
      absl::StrAppend(
          &out, gputune::ctl::RoffEscape(absl::StripAsciiWhitespace(line)),
          "\n");
    }
  }
  absl::StrAppend(&out,
                  ".SH SIGNALS\nSIGHUP re\\-reads the config file's "
                  "log_level and autotune_log; SIGTERM and SIGINT stop.\n"
                  ".SH SEE ALSO\n.BR gputunectl (1),\n.BR systemctl (1)\n");
  return out;
}

bool Write(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  if (!out.flush()) {
    std::cerr << "gputune_docgen: cannot write " << path << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gputune_docgen OUTDIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  const bool ok =
      Write(dir + "/gputunectl.1", gputune::ctl::ManPage()) &&
      Write(dir + "/gputuned.8", GputunedPage()) &&
      Write(dir + "/gputunectl.bash", gputune::ctl::BashCompletion());
  return ok ? 0 : 1;
}
