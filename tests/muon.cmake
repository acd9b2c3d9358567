# Sharded Muon (issue 3): the step against the float64 reference at 1..4 ranks
# (seven matrices, so no world size divides them evenly), and the host
# Newton-Schulz on its own.
dmuon_add_gtest(test_muon SOURCES mpi/test_muon.cpp NPROCS 1 2 3 4 LABELS muon)
dmuon_add_gtest(test_muon_newton_schulz SOURCES unit/test_muon_newton_schulz.cpp NPROCS 1 LABELS "unit;muon")
