// EntrySummary: an entry as lookups carry it, without its measurements and
// fingerprint (a HIT's fingerprint is the daemon's own; GetEntry has both).
// The store keeps it serialized beside the full entry so the daemon's
// in-memory index loads without parsing whole entries.
#ifndef GPUTUNE_PROTO_ENTRY_SUMMARY_H_
#define GPUTUNE_PROTO_ENTRY_SUMMARY_H_

#include "gputune/v1/tune.pb.h"

namespace gputune {

v1::Entry EntrySummary(const v1::Entry& entry);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_ENTRY_SUMMARY_H_
