// Command line and config file of the C example, with Boost.Program_options:
// every key of surrogate.cfg is also an option (--key=value), and the command
// line wins over the file. Then the C code takes over (surrogate_run).
#include <mpi.h>

#include <boost/program_options.hpp>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include "surrogate.h"

namespace po = boost::program_options;

namespace {

void copy_string(char* dst, std::size_t len, const std::string& src, const char* key) {
  if (src.size() >= len) throw po::error(std::string(key) + " is longer than " + std::to_string(len - 1) + " characters");
  std::memcpy(dst, src.c_str(), src.size() + 1);
}

// Returns -1 to go on, else the exit status.
int parse(int argc, char** argv, surrogate_config& c, int rank) {
  std::string config, optimizer, backend, loss_csv, checkpoint_dir;
  po::options_description keys("keys (in the config file as `key = value`, here as --key=value)");
  keys.add_options()
      ("nx", po::value(&c.nx)->required(), "global grid points")
      ("viscosity", po::value(&c.viscosity)->required(), "nu")
      ("horizon", po::value(&c.horizon)->required(), "solver steps between input and target")
      ("episode", po::value(&c.episode)->required(), "training steps per initial condition")
      ("target_scale", po::value(&c.target_scale)->required(), "target = target_scale * du/dt")
      ("stencil", po::value(&c.stencil)->required(), "input window half-width")
      ("hidden", po::value(&c.hidden)->required(), "hidden width")
      ("layers", po::value(&c.layers)->required(), "hidden layers")
      ("batch", po::value(&c.batch)->required(), "training pairs per rank per step")
      ("optimizer", po::value(&optimizer)->required(), "muon (Muon + AdamW) or adam (AdamW only)")
      ("muon_lr", po::value(&c.muon_lr)->required(), "Muon learning rate")
      ("adam_lr", po::value(&c.adam_lr)->required(), "AdamW learning rate")
      ("lr_final", po::value(&c.lr_final)->required(), "learning rates decay linearly to this fraction")
      ("weight_decay", po::value(&c.weight_decay)->required(), "decoupled weight decay")
      ("max_grad_norm", po::value(&c.max_grad_norm)->required(), "clip threshold (<= 0: off)")
      ("backend", po::value(&backend)->required(), "cpu, cuda or auto")
      ("steps", po::value(&c.steps)->required(), "training steps")
      ("seed", po::value(&c.seed)->required(), "random seed")
      ("log_every", po::value(&c.log_every)->required(), "steps between progress lines")
      ("loss_csv", po::value(&loss_csv)->required(), "loss curve file (rank 0)")
      ("checkpoint_every", po::value(&c.checkpoint_every)->required(), "steps between checkpoints")
      ("checkpoint_dir", po::value(&checkpoint_dir)->required(), "checkpoint directory")
      ("restart", po::value(&c.restart)->required(), "1: continue from the latest checkpoint");
  po::options_description cli("burgers_surrogate_c: online training of a Burgers surrogate with dmuon");
  cli.add_options()("help,h", "this help")(
      "config,c", po::value(&config)->default_value("surrogate.cfg"), "config file (key = value); every key is required");
  cli.add(keys);

  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, cli), vm);
  if (vm.count("help")) {
    if (rank == 0) std::cout << cli << "\n";
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
    if (rank == 0) std::cerr << "burgers_surrogate_c: " << e.what() << " (try --help)\n";
    status = 2;
  }
  if (status < 0) status = surrogate_run(&cfg, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
