// gputunectl: the operator's command line for gputuned. See
// `gputunectl --help` and docs/client.md.
#include <iostream>
#include <string>
#include <vector>

#include "client/gputunectl/commands.h"

int main(int argc, char** argv) {
  return gputune::ctl::Main(std::vector<std::string>(argv + 1, argv + argc),
                            std::cout, std::cerr);
}
