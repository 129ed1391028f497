// A recorded execution must come back exactly as measured: kernel library
// struct -> gputune.v1 message -> SQLite -> message -> struct.
#include <stdlib.h>

#include <filesystem>

#include "proto/execution_convert.h"
#include "proto/key_format.h"
#include "storage/tune_store.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#if defined(GPUTUNE_HAVE_CUDA)
#include "kernels/cuda/cublaslt_dense.h"
#endif

namespace gputune {
namespace {

// Stores exec in a fresh database, reopens it and reads it back.
kernels::Execution ThroughStore(const kernels::Execution& exec) {
  char tmpl[] = "/tmp/gputune-rt-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string path = dir + "/t.db";
  v1::Entry entry;
  *entry.mutable_key() = testing::DenseKey(1);
  *entry.mutable_execution() = ToProto(exec);
  *entry.add_measurements()->mutable_execution() = ToProto(exec);
  {
    storage::OpenReport report;
    auto store = storage::TuneStore::Open({path, true}, &report);
    REQUIRE(store.ok());
    REQUIRE((*store)->Put(entry).ok());
  }
  storage::OpenReport report;
  auto store = storage::TuneStore::Open({path, true}, &report);
  REQUIRE(store.ok());
  auto got = (*store)->Get(KeyId(entry.key()));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK(FromProto((*got)->measurements(0).execution()) == exec);
  std::filesystem::remove_all(dir);
  return FromProto((*got)->execution());
}

}  // namespace

TEST_CASE("a host execution round-trips through proto and storage") {
  const kernels::Execution exec{
      "host.blocked", {{"tile_m", 8}, {"tile_n", 8}, {"tile_k", 512}}, 0};
  CHECK(ThroughStore(exec) == exec);
}

#if defined(GPUTUNE_HAVE_CUDA)
TEST_CASE("a cuBLASLt algo config round-trips through proto and storage") {
  kernels::LtAlgoConfig config;
  config.algo_id = 66;
  config.tile = 20;
  config.stages = 8;
  config.splitk = 4;
  config.reduction_scheme = 2;
  config.swizzle = 1;
  config.custom_option = 3;
  config.inner_shape = 5;
  config.cluster_shape = 2;
  const kernels::Execution exec = kernels::ToExecution(config, 32u << 20);
  const kernels::Execution back = ThroughStore(exec);
  CHECK(back == exec);
  const kernels::StatusOr<kernels::LtAlgoConfig> restored =
      kernels::LtAlgoConfigFromExecution(back);
  REQUIRE(restored.ok());
  CHECK(*restored == config);
  CHECK(back.workspace_bytes == (32u << 20));
}
#endif

}  // namespace gputune
