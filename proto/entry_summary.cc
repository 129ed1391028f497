#include "entry_summary.h"

namespace gputune {

v1::Entry EntrySummary(const v1::Entry& entry) {
  v1::Entry summary;
  *summary.mutable_key() = entry.key();
  *summary.mutable_execution() = entry.execution();
  if (entry.has_default_time()) {
    *summary.mutable_default_time() = entry.default_time();
  }
  if (entry.has_chosen_time()) {
    *summary.mutable_chosen_time() = entry.chosen_time();
  }
  summary.set_speedup(entry.speedup());
  summary.set_source(entry.source());
  if (entry.has_measured_at()) {
    *summary.mutable_measured_at() = entry.measured_at();
  }
  summary.set_recorded_by(entry.recorded_by());
  return summary;
}

}  // namespace gputune
