#include "tests/client/client_test_support.h"

#include <fstream>
#include <sstream>
#include <stdexcept>

#include "client/gputunectl/commands.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"
#include "tests/support/catch.h"
#include "tests/support/sanitized.h"

namespace gputune::testing {
namespace {

class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(RpcCounter* counter, std::string method)
      : counter_(counter), method_(std::move(method)) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      counter_->Count(method_);
    }
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_MESSAGE)) {
      std::vector<grpc::Slice> slices;
      std::string bytes;
      grpc::ByteBuffer* message = methods->GetSerializedSendMessage();
      if (message != nullptr && message->Dump(&slices).ok()) {
        for (const grpc::Slice& slice : slices) {
          bytes.append(reinterpret_cast<const char*>(slice.begin()),
                       slice.size());
        }
      }
      counter_->Sent(method_, std::move(bytes));
    }
    methods->Proceed();
  }

 private:
  RpcCounter* const counter_;
  const std::string method_;
};

class CountingFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit CountingFactory(RpcCounter* counter) : counter_(counter) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    // "/gputune.v1.TuneService/Lookup" -> "Lookup"
    std::string method = info->method();
    method = method.substr(method.rfind('/') + 1);
    return new CountingInterceptor(counter_, method);
  }

 private:
  RpcCounter* const counter_;
};

}  // namespace

std::shared_ptr<grpc::Channel> RpcCounter::Channel(
    const std::string& endpoint) {
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      factories;
  factories.push_back(std::make_unique<CountingFactory>(this));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      endpoint, grpc::InsecureChannelCredentials(),
      ChannelArgumentsFor(ClientOptions{}), std::move(factories));
}

int RpcCounter::total() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [method, count] : counts_) {
    if (method != "SubscribeChanges") n += count;
  }
  return n;
}

int RpcCounter::of(const std::string& method) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(method);
  return it == counts_.end() ? 0 : it->second;
}

std::string RpcCounter::last_request(const std::string& method) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = last_requests_.find(method);
  return it == last_requests_.end() ? "" : it->second;
}

void RpcCounter::Count(const std::string& method) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[method];
}

void RpcCounter::Sent(const std::string& method, std::string request) {
  std::lock_guard<std::mutex> lock(mu_);
  last_requests_[method] = std::move(request);
}

std::unique_ptr<Client> ClientOf(const DaemonProcess& daemon,
                                 ClientOptions options, RpcCounter* counter) {
  options.endpoint = daemon.endpoint();
  // Deadlines left at their defaults (2 s a call, 250 ms a lookup: budgets
  // for inference on an idle daemon) become generous ones, so that a call
  // that does real work answers on a loaded machine and under the
  // sanitizers; a test about deadlines sets its own, which it keeps.
  const ClientOptions defaults;
  if (options.deadline == defaults.deadline) {
    options.deadline = absl::Seconds(60 * kSlowdown);
  }
  if (options.lookup_deadline == defaults.lookup_deadline) {
    options.lookup_deadline = absl::Seconds(30 * kSlowdown);
  }
  if (counter != nullptr) options.channel = counter->Channel(daemon.endpoint());
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  if (!client.ok()) throw std::runtime_error(client.status().ToString());
  return std::move(*client);
}

v1::Entry MakeHit(Client& client, const v1::Key& key,
                  const std::string& kernel) {
  absl::StatusOr<ClaimGuard> claim = client.Claim(key);
  if (!claim.ok() || !claim->granted()) {
    throw std::runtime_error("MakeHit: claim not granted: " +
                             (claim.ok()
                                  ? v1::ClaimOutcome_Name(claim->outcome())
                                  : claim.status().ToString()));
  }
  v1::RecordRequest result;
  result.mutable_execution()->set_kernel(kernel);
  (*result.mutable_execution()->mutable_params())["tile"] = 64;
  (*result.mutable_execution()->mutable_params())["stages"] = 3;
  result.mutable_execution()->set_data(std::string("\x01\x00\xff", 3));
  for (int i = 0; i < 2; ++i) {
    v1::CandidateMeasurement* m = result.add_measurements();
    m->mutable_execution()->set_kernel(i == 0 ? "test.default" : kernel);
    m->set_validation(v1::VALIDATION_PASSED);
    m->set_max_abs_error(0.0078125 * (i + 1) + 1e-9);
    m->mutable_median()->set_nanos(50000 - 10000 * i + 7);
    m->mutable_spread()->set_nanos(1234 + i);
    m->set_samples(100 + i);
    m->set_is_default(i == 0);
    m->set_chosen(i == 1);
  }
  result.mutable_default_time()->set_nanos(50007);
  result.mutable_chosen_time()->set_nanos(40007);
  absl::StatusOr<v1::Entry> entry = claim->Record(result);
  if (!entry.ok()) throw std::runtime_error(entry.status().ToString());
  return *entry;
}

v1::Key CustomKey(const std::string& params, const std::string& cs) {
  v1::Key key;
  key.mutable_custom()->set_op("test_op");
  key.mutable_custom()->set_params(params);
  key.set_candidate_set(cs);
  return key;
}

CtlResult RunCtlAt(const std::string& endpoint, std::vector<std::string> args) {
  args.insert(args.begin(), "--endpoint=" + endpoint);
  std::ostringstream out, err;
  CtlResult r;
  // Not a terminal: nothing asks, whatever the test runner's stdin is.
  r.exit_code = ctl::Main(args, out, err, ctl::Terminal{});
  r.out = out.str();
  r.err = err.str();
  return r;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  INFO(path);
  REQUIRE(out.good());
}

CtlResult RunCtl(const DaemonProcess& daemon, std::vector<std::string> args) {
  return RunCtlAt(daemon.endpoint(), std::move(args));
}

}  // namespace gputune::testing
