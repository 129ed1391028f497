// What libgputune_dense.so offers the C API in libgputune.so, which loads it
// with dlopen on the first gputune_dense_runner_create (so that libgputune
// itself needs no CUDA libraries, and a process without a GPU never loads
// them). Both libraries are built together; the table may use C++ types.
#ifndef GPUTUNE_CLIENT_SRC_DENSE_MODULE_H_
#define GPUTUNE_CLIENT_SRC_DENSE_MODULE_H_

#include "absl/status/statusor.h"
#include "gputune/dense_runner.h"

namespace gputune::client_internal {

// The runner's code lives in the module: libgputune calls only through the
// table (a raw pointer, freed by destroy).
struct DenseModuleV1 {
  absl::StatusOr<DenseRunner*> (*create)();
  void (*destroy)(DenseRunner* runner);
  absl::StatusOr<DenseRun> (*run)(DenseRunner& runner,
                                  const v1::Execution& execution,
                                  const DenseArgs& args);
};

// The symbol libgputune_dense.so exports (extern "C"): returns its table.
inline constexpr char kDenseModuleSymbol[] = "gputune_dense_module_v1";
inline constexpr char kDenseModuleFile[] = "libgputune_dense.so.0";

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_DENSE_MODULE_H_
