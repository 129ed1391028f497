// gputune_dense_*: the replay (gputune/dense_runner.h) for C. The runner
// lives in libgputune_dense.so, loaded with dlopen on first use from the
// directory libgputune.so was loaded from (then the loader's paths), so that
// libgputune needs no CUDA libraries and a process without a GPU never
// loads them. Without CUDA at build time there is no such library and the
// calls say so.
#include <dlfcn.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "client/src/c_api_internal.h"
#include "gputune/gputune.h"

#if GPUTUNE_CLIENT_WITH_DENSE
#include "client/src/dense_module.h"
#include "gputune/dense_runner.h"
#endif

using gputune::c_api::Fail;
using gputune::c_api::Guarded;

struct gputune_dense_runner {
#if GPUTUNE_CLIENT_WITH_DENSE
  const gputune::client_internal::DenseModuleV1* module = nullptr;
  gputune::DenseRunner* runner = nullptr;  // the module's; freed by it
  ~gputune_dense_runner() {
    if (runner != nullptr) module->destroy(runner);
  }
#endif
  std::string fallback_reason;  // of the last run
};

namespace gputune::c_api {
namespace {

#if GPUTUNE_CLIENT_WITH_DENSE
struct LoadedModule {
  const client_internal::DenseModuleV1* module = nullptr;
  std::string error;
};

// Loads libgputune_dense.so once per process (the handle is never closed:
// the runners' code lives in it). Immutable after the first call.
const LoadedModule& DenseModule() {
  static const LoadedModule* loaded = [] {
    auto* out = new LoadedModule();
    std::string tried;
    void* handle = nullptr;
    Dl_info self{};
    if (dladdr(reinterpret_cast<void*>(&gputune_dense_runner_create), &self) !=
            0 &&
        self.dli_fname != nullptr) {
      std::string path = self.dli_fname;
      const size_t slash = path.rfind('/');
      path = (slash == std::string::npos ? std::string(".")
                                         : path.substr(0, slash)) +
             "/" + client_internal::kDenseModuleFile;
      handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) tried = dlerror();
    }
    if (handle == nullptr) {
      handle = dlopen(client_internal::kDenseModuleFile, RTLD_NOW | RTLD_LOCAL);
    }
    if (handle == nullptr) {
      const char* e = dlerror();
      out->error = std::string("gputune: cannot load ") +
                   client_internal::kDenseModuleFile + " (" +
                   (e != nullptr ? e : "") +
                   (tried.empty() ? "" : "; " + tried) +
                   "): install it next to libgputune.so (the gputune "
                   "package built with CUDA has it)";
      return out;
    }
    using Entry = const void* (*)();
    auto entry = reinterpret_cast<Entry>(
        dlsym(handle, client_internal::kDenseModuleSymbol));
    if (entry == nullptr) {
      out->error = std::string("gputune: ") +
                   client_internal::kDenseModuleFile + " has no " +
                   client_internal::kDenseModuleSymbol +
                   ": it is from another gputune version";
      return out;
    }
    out->module = static_cast<const client_internal::DenseModuleV1*>(entry());
    return out;
  }();
  return *loaded;
}
#endif

}  // namespace
}  // namespace gputune::c_api

extern "C" {

gputune_code gputune_dense_runner_create(gputune_dense_runner** runner) {
  return Guarded([&] {
    if (auto c = gputune::c_api::NotNull(runner, "runner"); c != GPUTUNE_OK) {
      return c;
    }
    *runner = nullptr;
#if GPUTUNE_CLIENT_WITH_DENSE
    const auto& loaded = gputune::c_api::DenseModule();
    if (loaded.module == nullptr) {
      return Fail(absl::StatusCode::kFailedPrecondition, loaded.error);
    }
    auto made = loaded.module->create();
    if (!made.ok()) return Fail(made.status());
    auto out = std::make_unique<gputune_dense_runner>();
    out->module = loaded.module;
    out->runner = *made;
    *runner = out.release();
    return GPUTUNE_OK;
#else
    return Fail(absl::StatusCode::kFailedPrecondition,
                "gputune: libgputune was not built with CUDA, so it cannot "
                "run dense executions (rebuild gputune with -DGPUTUNE_CUDA=ON "
                "on a machine with the CUDA toolkit, or run the execution "
                "with your own kernels)");
#endif
  });
}

void gputune_dense_runner_free(gputune_dense_runner* runner) { delete runner; }

const char* gputune_dense_runner_fallback_reason(
    const gputune_dense_runner* runner) {
  return runner != nullptr ? runner->fallback_reason.c_str() : "";
}

gputune_code gputune_dense_run(gputune_dense_runner* runner,
                               const gputune_result* result,
                               const gputune_dense_args* args, int* fell_back) {
  return Guarded([&] {
    if (fell_back != nullptr) *fell_back = 0;
    if (auto c = gputune::c_api::NotNull(runner, "runner"); c != GPUTUNE_OK) {
      return c;
    }
    runner->fallback_reason.clear();
    gputune_dense_args a{};
    if (auto c = gputune::c_api::ReadSized(args, sizeof(gputune_dense_args),
                                           "args", &a);
        c != GPUTUNE_OK) {
      return c;
    }
#if GPUTUNE_CLIENT_WITH_DENSE
    gputune::DenseArgs d;
    d.m = a.m;
    d.n = a.n;
    d.k = a.k;
    d.x = a.x;
    d.w = a.w;
    d.y = a.y;
    d.stream = static_cast<CUstream_st*>(a.stream);
    d.workspace = a.workspace;
    d.workspace_bytes = a.workspace_bytes;
    const gputune::v1::Execution& execution =
        result != nullptr
            ? gputune::ExecutionToRun(result->state(), result->stale_usable(),
                                      result->entry())
            : gputune::v1::Execution::default_instance();
    auto run = runner->module->run(*runner->runner, execution, d);
    if (!run.ok()) return Fail(run.status());
    if (run->fell_back) {
      runner->fallback_reason = std::move(run->reason);
      if (fell_back != nullptr) *fell_back = 1;
    }
    return GPUTUNE_OK;
#else
    (void)result;
    return Fail(absl::StatusCode::kFailedPrecondition,
                "gputune: libgputune was not built with CUDA");
#endif
  });
}

}  // extern "C"
