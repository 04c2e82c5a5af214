// lab_crash_helper OUTPUT BACKEND… — starts a lab with the given backends, writes what it started to
// OUTPUT ("dir <path>" then "server <name> <pid>" lines, renamed into place when complete), and then
// waits to be killed. lab_crash kills it with SIGKILL and checks that its servers die with it.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "dlock/lab/lab.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: lab_crash_helper OUTPUT BACKEND...\n";
    return 2;
  }
  std::vector<dlock::lab::backend> backends;
  for (int i = 2; i < argc; ++i) {
    auto which = dlock::lab::parse_backend(argv[i]);
    if (!which) {
      std::cerr << "unknown backend " << argv[i] << "\n";
      return 2;
    }
    backends.push_back(*which);
  }
  try {
    dlock::lab::lab running(backends);
    std::string output = argv[1];
    {
      std::ofstream out(output + ".tmp");
      out << "dir " << running.dir().string() << "\n";
      for (auto* server : running.servers()) out << "server " << server->name() << " " << server->pid() << "\n";
    }
    std::filesystem::rename(output + ".tmp", output);
    for (;;) ::pause();
  } catch (const std::exception& error) {
    std::cerr << "lab_crash_helper: " << error.what() << "\n";
    return 1;
  }
}
