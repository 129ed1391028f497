// Which GPU a daemon says it serves (daemon/device_identity.h), and the
// TuneDense check that refuses another GPU's benchmark.
#include "daemon/device_identity.h"

#include "tests/support/catch.h"

namespace gputune {
namespace {

constexpr char kGpu[] = "GPU-8f3c1d2e-5b7d-4c9e-a0f1-2d3e4f5a6b7c";

TEST_CASE(
    "the CUDA backend's UUID is the identity and an override must match it") {
  absl::StatusOr<DeviceIdentity> id =
      ChooseIdentity("cuda", kGpu, "00000000:65:00.0", "", "0", "m");
  REQUIRE(id.ok());
  CHECK(id->uuid == kGpu);
  CHECK(id->pci_bus_id == "00000000:65:00.0");
  CHECK(ChooseIdentity("cuda", kGpu, "",
                       "GPU-8F3C1D2E-5B7D-4C9E-A0F1-2D3E4F5A6B7C", "0", "m")
            .ok());
  absl::StatusOr<DeviceIdentity> lie =
      ChooseIdentity("cuda", kGpu, "", "GPU-00000000", "0", "m");
  REQUIRE(lie.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(lie.status().message()).find(kGpu) != std::string::npos);
}

TEST_CASE("the host backend's identity: the machine and device, or given") {
  const std::string zero = HostDeviceUuid("machine-a", "0");
  CHECK(zero.rfind("HOST-", 0) == 0);
  CHECK(zero.size() == 41);
  CHECK(zero == HostDeviceUuid("machine-a", "0"));  // stable
  CHECK(zero != HostDeviceUuid("machine-a", "1"));
  CHECK(zero != HostDeviceUuid("machine-b", "0"));
  CHECK(HostDeviceUuid("ab", "c") != HostDeviceUuid("a", "bc"));
  CHECK(ChooseIdentity("host", "", "", "", "0", "machine-a")->uuid == zero);
  CHECK(ChooseIdentity("host", "", "", kGpu, "0", "machine-a")->uuid == kGpu);
  // No backend: a --device that is a GPU UUID, else unknown.
  CHECK(ChooseIdentity("none", "", "", "", kGpu, "m")->uuid == kGpu);
  CHECK(ChooseIdentity("none", "", "", "", "0", "m")->uuid.empty());
  CHECK(ChooseIdentity("host", "", "", "bad/uuid", "0", "m").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("TuneDense for another GPU is refused naming both") {
  CHECK(CheckTuneDevice("", kGpu).ok());
  CHECK(CheckTuneDevice(kGpu, kGpu).ok());
  absl::Status other = CheckTuneDevice("GPU-1234", kGpu);
  REQUIRE(other.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(other.message()).find("GPU-1234") != std::string::npos);
  CHECK(std::string(other.message()).find(kGpu) != std::string::npos);
  CHECK(CheckTuneDevice("GPU-1234", "").code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gputune
