// The summary of an entry: the entry as lookups carry it, without its
// measurements and fingerprint (a HIT's fingerprint is the daemon's own;
// GetEntry has both). The store keeps it serialized beside the full entry so
// the daemon's in-memory index loads without parsing whole entries.
#ifndef GPUTUNE_PROTO_ENTRY_SUMMARY_H_
#define GPUTUNE_PROTO_ENTRY_SUMMARY_H_

#include <string>

#include "gputune/v1/tune.pb.h"

namespace gputune {

// `message` serialized with map fields in key order: equal messages give
// equal bytes (SerializeAsString orders a map's entries as its hash table
// happens to hold them).
std::string DeterministicBytes(const google::protobuf::MessageLite& message);

// The summary of `entry`, serialized deterministically (map fields in key
// order): entries with equal executions hold equal execution bytes, which
// BatchLookup's share_executions relies on to send each once.
std::string SerializedEntrySummary(const v1::Entry& entry);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_ENTRY_SUMMARY_H_
