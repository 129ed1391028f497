// Helpers for the client suite: clients on a DaemonProcess, an interceptor
// that counts the RPCs a client sends, entries made through claim + record,
// and gputunectl run in-process.
#ifndef GPUTUNE_TESTS_CLIENT_CLIENT_TEST_SUPPORT_H_
#define GPUTUNE_TESTS_CLIENT_CLIENT_TEST_SUPPORT_H_

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gputune/client.h"
#include "tests/support/daemon_process.h"
#include "tests/support/eventually.h"

namespace gputune::testing {

// Counts the RPCs sent through channels built by Channel().
class RpcCounter {
 public:
  // A channel to `endpoint` with the client's own arguments and the counter.
  std::shared_ptr<grpc::Channel> Channel(const std::string& endpoint);
  // RPCs started, in total and for one method (e.g. "Lookup"). The total
  // leaves out the client's background change stream (SubscribeChanges).
  int total() const;
  int of(const std::string& method) const;

  // The bytes of the last request sent to `method`; empty if none.
  std::string last_request(const std::string& method) const;

  void Count(const std::string& method);
  void Sent(const std::string& method, std::string request);

 private:
  mutable std::mutex mu_;
  std::map<std::string, int> counts_;
  std::map<std::string, std::string> last_requests_;
};

// A client of `daemon`. A non-null `counter` sees its RPCs. Deadlines left
// at ClientOptions' defaults are made generous (60 s a call, 30 s a lookup,
// three times that under the sanitizers); ones the test set are kept.
std::unique_ptr<Client> ClientOf(const DaemonProcess& daemon,
                                 ClientOptions options = {},
                                 RpcCounter* counter = nullptr);

// Makes `key` a HIT through claim + record (kernel `kernel`, two measured
// candidates); returns the recorded entry.
v1::Entry MakeHit(Client& client, const v1::Key& key,
                  const std::string& kernel = "test.kernel");

// A custom-op key for tests.
v1::Key CustomKey(const std::string& params, const std::string& cs = "cs1");

// Writes `text` to `path` (replacing it); REQUIRE fails when it cannot.
// (ReadFile, daemon_process.h, reads one back.)
void WriteFile(const std::string& path, const std::string& text);

// gputunectl run in-process.
struct CtlResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CtlResult RunCtl(const DaemonProcess& daemon, std::vector<std::string> args);
CtlResult RunCtlAt(const std::string& endpoint, std::vector<std::string> args);

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_CLIENT_CLIENT_TEST_SUPPORT_H_
