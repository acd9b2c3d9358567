// Command line and config file of the C example, with Boost.Program_options:
// every key of surrogate.cfg is also an option (--key=value), and the command
// line wins over the file. Every value is checked here, before any rank
// starts work, with a message naming the option; then the C code takes over
// (surrogate_run).
#include <mpi.h>

#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "mlp.h"
#include "surrogate.h"

namespace po = boost::program_options;

namespace {

// Exit statuses: 0 done (or --help), 2 a bad option or config file.
constexpr int kUsageError = 2;

void copy_string(char* dst, std::size_t len, const std::string& src, const char* key) {
  if (src.empty()) throw po::error(std::string("--") + key + " must not be empty");
  if (src.size() >= len) throw po::error(std::string("--") + key + " is longer than " + std::to_string(len - 1) + " characters");
  std::memcpy(dst, src.c_str(), src.size() + 1);
}

template <class T>
void require(bool ok, const char* key, T value, const char* rule) {
  if (ok) return;
  std::ostringstream message;
  message << "--" << key << "=" << value << ": must be " << rule;
  throw po::error(message.str());
}

// The rules, the same as the Fortran example's (check_values in
// examples/fortran/example_config.f90). NaN fails every comparison, so fails.
void check_values(const surrogate_config& c) {
  require(c.nx >= 1, "nx", c.nx, ">= 1");
  require(c.viscosity >= 0 && std::isfinite(c.viscosity), "viscosity", c.viscosity, ">= 0");
  require(c.horizon >= 1, "horizon", c.horizon, ">= 1");
  require(c.episode >= 1, "episode", c.episode, ">= 1");
  require(c.target_scale > 0 && std::isfinite(c.target_scale), "target_scale", c.target_scale, "> 0");
  require(c.stencil >= 0, "stencil", c.stencil, ">= 0");
  require(c.hidden >= 1, "hidden", c.hidden, ">= 1");
  require(c.layers >= 1 && c.layers < MLP_MAX_LINEAR, "layers", c.layers, "between 1 and 15");
  require(c.batch >= 1, "batch", c.batch, ">= 1");
  require(std::strcmp(c.optimizer, "muon") == 0 || std::strcmp(c.optimizer, "adam") == 0, "optimizer", c.optimizer,
          "muon or adam");
  require(c.muon_lr > 0 && std::isfinite(c.muon_lr), "muon_lr", c.muon_lr, "> 0");
  require(c.adam_lr > 0 && std::isfinite(c.adam_lr), "adam_lr", c.adam_lr, "> 0");
  require(c.lr_final >= 0 && c.lr_final <= 1, "lr_final", c.lr_final, "between 0 and 1");
  require(c.weight_decay >= 0 && std::isfinite(c.weight_decay), "weight_decay", c.weight_decay, ">= 0");
  require(!std::isnan(c.max_grad_norm), "max_grad_norm", c.max_grad_norm, "a number");
  require(c.steps >= 1, "steps", c.steps, ">= 1");
  require(c.log_every >= 1, "log_every", c.log_every, ">= 1");
  require(c.restart == 0 || c.restart == 1, "restart", c.restart, "0 or 1");
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

// --help: the options with their values in the config file (the defaults)
// and the file's comment on each line, which is where they are explained.
void print_help(const std::string& config) {
  std::cout << "burgers_surrogate_c: online training of a Burgers surrogate with dmuon\n\n"
               "usage: mpiexec -n RANKS burgers_surrogate_c [--config=FILE] [--key=value ...]\n\n"
               "  -h, --help        this help\n"
               "  -c, --config=FILE the config file, `key = value` lines (default surrogate.cfg)\n\n"
               "Every key of the config file is an option too; the command line wins.\n"
               "Exit status: 0 done, 75 checkpointed on a signal (run again to continue),\n"
               "2 a bad option, 1 a failure.\n\n";
  std::ifstream in(config);
  if (!in) {
    std::cout << "(config file " << config << " not found: no defaults to show)\n";
    return;
  }
  std::cout << "keys, with their values in " << config << ":\n";
  for (std::string line; std::getline(in, line);) {
    const auto hash = line.find('#'), eq = line.find('=');
    if (eq == std::string::npos || (hash != std::string::npos && hash < eq)) continue;
    const std::string comment = hash == std::string::npos ? "" : trim(line.substr(hash + 1));
    const std::string option = "--" + trim(line.substr(0, eq)) + "=" + trim(line.substr(eq + 1, hash - eq - 1));
    std::printf("  %-28s %s\n", option.c_str(), comment.c_str());
  }
}

// Returns -1 to go on, else the exit status.
int parse(int argc, char** argv, surrogate_config& c, int rank) {
  std::string config, optimizer, backend, loss_csv, checkpoint_dir;
  po::options_description keys("keys");
  keys.add_options()
      ("nx", po::value(&c.nx)->required())
      ("viscosity", po::value(&c.viscosity)->required())
      ("horizon", po::value(&c.horizon)->required())
      ("episode", po::value(&c.episode)->required())
      ("target_scale", po::value(&c.target_scale)->required())
      ("stencil", po::value(&c.stencil)->required())
      ("hidden", po::value(&c.hidden)->required())
      ("layers", po::value(&c.layers)->required())
      ("batch", po::value(&c.batch)->required())
      ("optimizer", po::value(&optimizer)->required())
      ("muon_lr", po::value(&c.muon_lr)->required())
      ("adam_lr", po::value(&c.adam_lr)->required())
      ("lr_final", po::value(&c.lr_final)->required())
      ("weight_decay", po::value(&c.weight_decay)->required())
      ("max_grad_norm", po::value(&c.max_grad_norm)->required())
      ("backend", po::value(&backend)->required())
      ("steps", po::value(&c.steps)->required())
      ("seed", po::value(&c.seed)->required())
      ("log_every", po::value(&c.log_every)->required())
      ("loss_csv", po::value(&loss_csv)->required())
      ("checkpoint_every", po::value(&c.checkpoint_every)->required())
      ("checkpoint_dir", po::value(&checkpoint_dir)->required())
      ("restart", po::value(&c.restart)->required());
  po::options_description cli;
  cli.add_options()("help,h", "")("config,c", po::value(&config)->default_value("surrogate.cfg"), "");
  cli.add(keys);

  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, cli), vm);
  if (vm.count("help")) {
    if (rank == 0) print_help(vm["config"].as<std::string>());
    return 0;
  }
  // The config file holds the defaults (no second copy of them here); values
  // stored first win, so the command line overrides the file.
  std::ifstream in(vm["config"].as<std::string>());
  if (!in) throw po::error("cannot read config file " + vm["config"].as<std::string>());
  po::store(po::parse_config_file(in, keys), vm);
  po::notify(vm);
  copy_string(c.optimizer, sizeof c.optimizer, optimizer, "optimizer");
  copy_string(c.backend, sizeof c.backend, backend, "backend");
  copy_string(c.loss_csv, sizeof c.loss_csv, loss_csv, "loss_csv");
  copy_string(c.checkpoint_dir, sizeof c.checkpoint_dir, checkpoint_dir, "checkpoint_dir");
  check_values(c);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, status = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  surrogate_config cfg{};
  try {
    status = parse(argc, argv, cfg, rank);
  } catch (const std::exception& e) {
    // Every rank parsed the same command line and file: one message is enough.
    if (rank == 0) std::cerr << "burgers_surrogate_c: " << e.what() << " (try --help)\n";
    status = kUsageError;
  }
  if (status < 0) status = surrogate_run(&cfg, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
