// libFuzzer target: the Redis front door's request reader (RespReader over
// hiredis's redisReader), which reads whatever a local process sends to
// --redis_listen. Any input, fed whole and fed in pieces, must give commands
// or an error whose message is a Redis error line ("ERR ..."), never a
// crash; both feedings must give the same commands; no command may exceed
// the limits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "daemon/redis/resp_reader.h"

namespace {

using gputune::redis::RespCommand;
using gputune::redis::RespLimits;
using gputune::redis::RespReader;

// The commands of `data` fed in pieces of `step` bytes; the last element is
// an empty command when the reader failed.
std::vector<RespCommand> Read(const uint8_t* data, size_t size, size_t step,
                              const RespLimits& limits) {
  RespReader reader(limits);
  std::vector<RespCommand> out;
  for (size_t at = 0; at < size; at += step) {
    const size_t n = std::min(step, size - at);
    if (!reader.Feed(reinterpret_cast<const char*>(data + at), n).ok()) {
      out.emplace_back();
      return out;
    }
    while (true) {
      auto next = reader.Next();
      if (!next.ok()) {
        if (!absl::StartsWith(next.status().message(), "ERR ")) abort();
        out.emplace_back();
        return out;
      }
      if (!next->has_value()) break;
      if ((*next)->empty() || (*next)->size() > limits.max_arguments) abort();
      size_t bytes = 0;
      for (const std::string& a : **next) {
        if (a.size() > limits.max_bulk_bytes) abort();
        bytes += a.size();
      }
      if (bytes > limits.max_command_bytes) abort();
      out.push_back(std::move(**next));
    }
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  RespLimits limits;  // small, so that the fuzzer reaches them
  limits.max_arguments = 16;
  limits.max_bulk_bytes = 64;
  limits.max_command_bytes = 256;
  limits.max_buffered_bytes = 1024;
  const std::vector<RespCommand> whole = Read(data, size, size + 1, limits);
  const std::vector<RespCommand> pieces = Read(data, size, 3, limits);
  // Fed in pieces, the reader sees at most as much buffered at once, so it
  // gives the same commands up to where either stopped.
  const size_t n = std::min(whole.size(), pieces.size());
  for (size_t i = 0; i + 1 < n; ++i) {
    if (whole[i] != pieces[i]) abort();
  }
  return 0;
}
