// CacheSync: one file-based tuner's cache file (tool_formats.h) kept in step
// with a gputuned: written from the daemon's entries before a job starts,
// and what the job adds to it imported back while it runs and when it ends.
//
//   CacheSync cache(client, "trtllm", "/cache/autotuner.json", "", std::cerr);
//   lock.LockFiles();
//   if (*lock.StartJob()) cache.WriteBeforeJob();
//   ...
//   lock.LockFiles();
//   cache.ImportNew();
//
// Every call expects the host's files locked (host_lock.h): the cache file
// and its record, FILE.gputune-sync.seen, are read and written by one
// gputune-sync of the host at a time. The record is the file as the daemon
// is known to have it (as last written from the daemon or imported into
// it): a row is new when the record lacks it, so each row a job adds is
// imported once, by whichever rank's gputune-sync finds it first, and the
// rows an earlier job added after its last import (it was killed) are
// imported before the next job's file is written.
#ifndef GPUTUNE_CLIENT_SYNC_CACHE_SYNC_H_
#define GPUTUNE_CLIENT_SYNC_CACHE_SYNC_H_

#include <cstddef>
#include <map>
#include <ostream>
#include <string>

#include "gputune/client.h"

namespace gputune::sync {

class CacheSync {
 public:
  // `client` and `log` must outlive this object. `format` is one of
  // ctl::ToolFormats(); `match_path` (may be empty) is a file of that format
  // whose metadata names the tool version to write when `path` has none.
  // Each event is one line on `log`, "gputune-sync: ...".
  CacheSync(Client& client, std::string format, std::string path,
            std::string match_path, std::ostream& log);

  // Before the job (the first gputune-sync of it on this host): imports
  // what the file has that the daemon was not given, then writes the file
  // from the daemon's entries of the file's own tool version (never another
  // version's entries into it; --match's version or the only one the daemon
  // holds when there is no file). When the daemon has no such entries, or
  // cannot be reached, the file is left as it is (and that is logged): the
  // job runs with what is there, the same for every rank.
  void WriteBeforeJob();

  // Imports the file's rows that its record lacks and, when that worked,
  // records the file as imported. Returns how many entries went in. A file
  // that does not parse, bad rows and a daemon that refuses or cannot be
  // reached are logged (each problem once) and the rows are tried again at
  // the next call.
  size_t ImportNew();

  const std::string& seen_path() const { return seen_path_; }

 private:
  // The identity of an entry as its format writes it: its key text and its
  // row (with the metadata) as a file of its own. Equal rows, equal
  // identities, whichever process parsed them.
  std::string Identity(const v1::Entry& entry) const;
  // Logs `line` unless it is the last line logged for the same `topic`.
  void LogOnce(const std::string& topic, const std::string& line);
  // Replaces the record with `text` (atomically); logs a failure.
  void Record(const std::string& text);

  Client& client_;
  const std::string format_;
  const std::string path_;
  const std::string seen_path_;
  const std::string match_path_;
  std::ostream& log_;
  std::map<std::string, std::string> last_logged_;  // topic -> line
};

}  // namespace gputune::sync

#endif  // GPUTUNE_CLIENT_SYNC_CACHE_SYNC_H_
