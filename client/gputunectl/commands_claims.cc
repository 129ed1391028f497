// claim, abandon, tune.
#include <signal.h>
#include <unistd.h>

#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/gputunectl/commands.h"
#include "client/gputunectl/entry_io.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"

namespace gputune::ctl {
namespace {

std::string Until(const google::protobuf::Timestamp& t) {
  const absl::Duration left = FromProto(t) - absl::Now();
  return absl::StrCat(
      ShortTime(t), " UTC (in ",
      absl::FormatDuration(absl::Trunc(std::max(left, absl::ZeroDuration()),
                                       absl::Milliseconds(100))),
      ")");
}

// Progress of the daemon's job for `key`, as a line for stderr; empty when
// the daemon does not say. The daemon reports candidates done and total, not
// the best time so far: the line shows what it has.
std::string Progress(const v1::GetStatusResponse& status, const v1::Key& key,
                     absl::Time since) {
  if (status.has_running_job() &&
      KeyId(status.running_job().key()) == KeyId(key)) {
    const v1::JobInfo& job = status.running_job();
    if (job.has_started_at()) since = FromProto(job.started_at());
    const std::string elapsed = absl::StrFormat(
        "%.1fs elapsed", absl::ToDoubleSeconds(absl::Now() - since));
    if (job.candidates_total() == 0) {
      return absl::StrCat("benchmarking: enumerating candidates, ", elapsed);
    }
    return absl::StrCat("benchmarking: ", job.candidates_done(), "/",
                        job.candidates_total(), " candidates measured, ",
                        elapsed);
  }
  if (status.queue_depth() > 0) {
    return absl::StrCat(
        "queued: ", status.queue_depth(),
        status.queue_depth() == 1 ? " job" : " jobs", " waiting",
        status.has_running_job() ? ", another key running" : "");
  }
  return "";
}

// The changing part of a progress line (without the elapsed time), to print
// a plain line only when something other than time moved.
std::string WithoutElapsed(const std::string& line) {
  const size_t comma = line.rfind(", ");
  return line.rfind("benchmarking", 0) == 0 && comma != std::string::npos
             ? line.substr(0, comma)
             : line;
}

// Ctrl-C while gputunectl follows a job: the job belongs to the daemon, and
// the operator should know it goes on. (Only async-signal-safe calls.)
extern "C" void SayJobGoesOn(int) {
  static const char kMessage[] =
      "\ngputunectl: interrupted; the job goes on in the daemon (gputunectl "
      "status shows it, gputunectl get KEY its result)\n";
  ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  _exit(130);
}

// Installs SayJobGoesOn for SIGINT while it lives.
class InterruptNotice {
 public:
  InterruptNotice() {
    struct sigaction action = {};
    action.sa_handler = SayJobGoesOn;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &previous_);
  }
  ~InterruptNotice() { sigaction(SIGINT, &previous_, nullptr); }
  InterruptNotice(const InterruptNotice&) = delete;
  InterruptNotice& operator=(const InterruptNotice&) = delete;

 private:
  struct sigaction previous_ = {};
};

}  // namespace

int RunClaim(Context& ctx) {
  if (ctx.cl.args.size() != 1) return UsageError(ctx, "claim takes one KEY");
  absl::StatusOr<v1::Key> key = ParseKeyText(ctx.cl.args[0]);
  if (!key.ok()) return UsageError(ctx, key.status().message());
  absl::StatusOr<ClaimGuard> guard = ctx.client.Claim(*key);
  if (!guard.ok()) return Fail(ctx, "claim", guard.status());
  const v1::ClaimResponse response = guard->response();
  // The claim outlives this process: nobody renews it, and it is not
  // abandoned on exit.
  guard->Release();
  if (ctx.json) {
    ctx.out << ToJson(response, /*pretty=*/true) << "\n";
  } else {
    const v1::ClaimInfo& c = response.claim();
    switch (response.outcome()) {
      case v1::CLAIM_OUTCOME_GRANTED:
        ctx.out << "claimed " << KeyText(*key) << ": claim " << c.claim_id()
                << ", lease until " << Until(c.lease_deadline())
                << "\nnobody tunes the key meanwhile; release it with "
                   "gputunectl abandon "
                << c.claim_id() << "\n";
        break;
      case v1::CLAIM_OUTCOME_PENDING:
        ctx.out << KeyText(*key) << " is held by '" << c.holder() << "' (claim "
                << c.claim_id() << ", lease until " << Until(c.lease_deadline())
                << ")\n";
        break;
      case v1::CLAIM_OUTCOME_HIT:
        ctx.out << KeyText(*key)
                << " is tuned already (gputunectl get shows the entry; "
                   "delete it first to re-tune)\n";
        break;
      case v1::CLAIM_OUTCOME_BACKOFF:
        ctx.out << KeyText(*key)
                << " is cooling down after repeated failed tuning until "
                << Until(response.retry_after()) << "\n";
        break;
      default:
        ctx.out << "unexpected answer: " << ToJson(response, false) << "\n";
    }
  }
  return response.outcome() == v1::CLAIM_OUTCOME_GRANTED ? kExitOk
                                                         : kExitConflict;
}

int RunAbandon(Context& ctx) {
  uint64_t claim_id = 0;
  if (ctx.cl.args.size() != 1 || !absl::SimpleAtoi(ctx.cl.args[0], &claim_id) ||
      claim_id == 0) {
    return UsageError(ctx,
                      "abandon takes one CLAIM_ID (gputunectl status lists "
                      "the live claims)");
  }
  absl::StatusOr<v1::AbandonResponse> r = ctx.client.AbandonClaim(
      claim_id, ctx.cl.Get("reason", "abandoned by an operator (gputunectl)"));
  if (!r.ok()) {
    if (r.status().code() == absl::StatusCode::kFailedPrecondition) {
      return Fail(ctx, absl::StrCat("abandon ", claim_id),
                  absl::FailedPreconditionError(absl::StrCat(
                      r.status().message(),
                      " (it may have expired or been recorded already; "
                      "gputunectl status lists the live claims)")));
    }
    return Fail(ctx, "abandon", r.status());
  }
  if (ctx.json) {
    ctx.out << ToJson(*r, /*pretty=*/false) << "\n";
  } else {
    ctx.out << "abandoned claim " << claim_id << ": the key is now "
            << KeyStateName(r->state());
    if (r->state() == v1::KEY_STATE_BACKOFF) {
      ctx.out << " until " << Until(r->retry_after());
    }
    ctx.out << "\n";
  }
  return kExitOk;
}

int RunTune(Context& ctx) {
  if (ctx.cl.args.size() != 1) return UsageError(ctx, "tune takes one KEY");
  absl::StatusOr<v1::Key> key = ParseKeyText(ctx.cl.args[0]);
  if (!key.ok()) return UsageError(ctx, key.status().message());
  if (!key->has_dense_bf16()) {
    return UsageError(ctx,
                      "tune benchmarks dense_bf16 keys only; custom ops are "
                      "tuned by their clients (claim + record)");
  }
  absl::StatusOr<absl::Duration> poll =
      DurationFlag(ctx.cl, "poll", absl::Milliseconds(250));
  if (!poll.ok()) return UsageError(ctx, poll.status().message());

  // The job runs in the daemon; this process only follows it, so an
  // interrupted gputunectl leaves the job running.
  absl::StatusOr<v1::KeyStatus> started =
      ctx.client.TuneDense(*key, /*wait=*/false);
  if (!started.ok()) return Fail(ctx, "tune", started.status());
  if (ctx.cl.Has("no-wait")) {
    if (ctx.json) {
      ctx.out << ToJson(*started, /*pretty=*/true) << "\n";
    } else {
      ctx.out << KeyText(*key) << ": " << KeyStateName(started->state())
              << (started->state() == v1::KEY_STATE_PENDING
                      ? " (gputunectl status shows the progress)"
                      : "")
              << "\n";
    }
    return kExitOk;
  }
  const absl::Time start = absl::Now();
  const absl::Time give_up = start + ctx.timeout;
  const bool live = ctx.terminal.err_is_terminal;
  std::string last_progress;
  // Ends the live line before anything else is printed.
  auto end_line = [&] {
    if (live && !last_progress.empty()) ctx.err << "\n";
    last_progress.clear();
  };
  InterruptNotice notice;
  v1::KeyState state = started->state();
  while (state != v1::KEY_STATE_HIT) {
    if (state != v1::KEY_STATE_PENDING) {
      end_line();
      return Fail(
          ctx, absl::StrCat("tune ", KeyText(*key)),
          absl::AbortedError(absl::StrCat(
              "the benchmark job failed (the key is now ", KeyStateName(state),
              "): the daemon's log says why (journalctl -u "
              "gputuned@<device>, or its stderr)")));
    }
    if (absl::Now() >= give_up) {
      end_line();
      return Fail(
          ctx, absl::StrCat("tune ", KeyText(*key)),
          absl::DeadlineExceededError(absl::StrCat(
              "not done within --timeout=", absl::FormatDuration(ctx.timeout),
              "; the job goes on in the daemon (gputunectl status)")));
    }
    absl::StatusOr<v1::GetStatusResponse> status = ctx.client.GetStatus();
    if (!status.ok()) {
      end_line();
      return Fail(ctx, "tune", status.status());
    }
    if (std::string p = Progress(*status, *key, start); !p.empty()) {
      if (live) {
        // One line, rewritten in place ("\r", then erase to its end).
        ctx.err << "\r\033[Ktune " << KeyText(*key) << ": " << p << std::flush;
        last_progress = std::move(p);
      } else if (WithoutElapsed(p) != WithoutElapsed(last_progress)) {
        ctx.err << "tune " << KeyText(*key) << ": " << p << "\n";
        last_progress = std::move(p);
      }
    }
    absl::SleepFor(*poll);
    absl::StatusOr<LookupResult> now = ctx.client.Lookup(*key);
    if (!now.ok()) {
      end_line();
      return Fail(ctx, "tune", now.status());
    }
    state = now->state();
  }
  end_line();
  absl::StatusOr<v1::GetEntryResponse> got = ctx.client.GetEntry(*key);
  if (!got.ok()) return Fail(ctx, "tune", got.status());
  PrintEntry(ctx, *got);
  return kExitOk;
}

}  // namespace gputune::ctl
