// ledgerkvctl: command-line client of a ledgerkv server (client/README.md).
#include <iostream>
#include <string>
#include <vector>

#include "client/ctl_run.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ledgerkv::client::RunCtl(args, std::cin, std::cout, std::cerr);
}
