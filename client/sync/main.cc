// gputune-sync: a job's file-based tuner cache through gputuned. See
// `gputune-sync --help` and docs/integrations.md.
#include <iostream>
#include <string>
#include <vector>

#include "client/sync/gputune_sync.h"

int main(int argc, char** argv) {
  return gputune::sync::SyncMain(
      std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
