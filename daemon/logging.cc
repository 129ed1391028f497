#include "daemon/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace gputune {
namespace {

// "%*" in a pattern: the sd-daemon "<N>" syslog priority of the level.
class PriorityFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    static constexpr const char* kPriority[] = {"<7>", "<7>", "<6>", "<4>",
                                                "<3>", "<2>", "<6>"};
    const char* p = kPriority[static_cast<int>(msg.level)];
    dest.append(p, p + 3);
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<PriorityFlag>();
  }
};

// Whether stderr is the stream systemd connected to the journal.
// systemd.exec(5): $JOURNAL_STREAM is "<device>:<inode>" of that stream, and a
// process should compare it with its stderr, because children inherit the
// variable even when their stderr goes elsewhere (a wrapper redirecting to a
// file, a test).
bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");
  if (stream == nullptr) return false;
  unsigned long long device = 0;
  unsigned long long inode = 0;
  if (std::sscanf(stream, "%llu:%llu", &device, &inode) != 2) return false;
  struct stat st;
  if (fstat(STDERR_FILENO, &st) != 0) return false;
  return static_cast<unsigned long long>(st.st_dev) == device &&
         static_cast<unsigned long long>(st.st_ino) == inode;
}

}  // namespace

void SetUpLogging(const std::string& level) {
  auto logger = spdlog::stderr_logger_mt("gputuned");
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (StderrIsJournal()) {
    formatter->add_flag<PriorityFlag>('*').set_pattern("%*%v");
  } else {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  }
  logger->set_formatter(std::move(formatter));
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::flush_on(spdlog::level::info);
}

}  // namespace gputune
