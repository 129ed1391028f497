#include "daemon/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "google/protobuf/stubs/logging.h"
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

// protobuf's log handler is a plain function pointer: its rate limiter has
// to live in a static.
class ProtobufLogLimiter {
 public:
  static ProtobufLogLimiter& Get() {
    static auto* limiter = new ProtobufLogLimiter();
    return *limiter;
  }

  static void Handle(google::protobuf::LogLevel level, const char* file,
                     int line, const std::string& message) {
    Get().Log(level, file, line, message);
  }

 private:
  void Log(google::protobuf::LogLevel level, const char* file, int line,
           const std::string& message) {
    uint64_t skipped = 0;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = absl::Now();
      if (now - last_ < absl::Seconds(1)) {
        ++skipped_;
        return;
      }
      last_ = now;
      skipped = skipped_;
      skipped_ = 0;
    }
    const std::string text = absl::StrCat(
        "protobuf (", file, ":", line, "): ", LogSafe(message),
        skipped > 0 ? absl::StrCat(" (", skipped, " similar lines skipped)")
                    : std::string());
    if (level >= google::protobuf::LOGLEVEL_ERROR) {
      spdlog::warn("{}", text);
    } else {
      spdlog::debug("{}", text);
    }
  }

  absl::Mutex mu_;
  absl::Time last_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t skipped_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

std::string LogSafe(absl::string_view text) {
  constexpr size_t kMax = 512;
  const bool cut = text.size() > kMax;
  std::string out = absl::CHexEscape(text.substr(0, kMax));
  if (cut) out += "...";
  return out;
}

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
  google::protobuf::SetLogHandler(&ProtobufLogLimiter::Handle);
}

}  // namespace gputune
