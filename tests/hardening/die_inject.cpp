// Fault injection for the rank-death tests (die_in_step.cpp and its Fortran
// twin die_in_step_f.F90), through the MPI profiling interface: the program
// defines the collectives dmuon calls and forwards them to PMPI_*. Once armed
// with a point, the rank SIGKILLs itself on entering that collective: no
// clean-up, no message, as a node failure or the OOM killer would do.
#include <mpi.h>

#include <csignal>
#include <cstring>
#include <string>

namespace {
std::string g_die_at;  // empty: not armed

void maybe_die(const char* point) {
  if (!g_die_at.empty() && g_die_at == point) std::raise(SIGKILL);
}
}  // namespace

extern "C" {

// point: adam_allreduce | muon_reduce_scatter | grad_norm | muon_allgather.
void dmuon_test_arm_death(const char* point) { g_die_at = point ? point : ""; }

// Both forms of each collective: the blocking one is what dmuon uses without a
// timeout; wrapping it too means a library that ignored the timeout would still
// meet the fault, hang, and fail the test by CTest's timeout.
int MPI_Allreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  maybe_die(t == MPI_DOUBLE ? "grad_norm" : "adam_allreduce");
  return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Iallreduce(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request* q) {
  maybe_die(t == MPI_DOUBLE ? "grad_norm" : "adam_allreduce");
  return PMPI_Iallreduce(s, r, n, t, op, c, q);
}
int MPI_Reduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  maybe_die("muon_reduce_scatter");
  return PMPI_Reduce_scatter_block(s, r, n, t, op, c);
}
int MPI_Ireduce_scatter_block(const void* s, void* r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request* q) {
  maybe_die("muon_reduce_scatter");
  return PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q);
}
int MPI_Allgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c) {
  maybe_die("muon_allgather");
  return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Iallgather(const void* s, int sn, MPI_Datatype st, void* r, int rn, MPI_Datatype rt, MPI_Comm c,
                   MPI_Request* q) {
  maybe_die("muon_allgather");
  return PMPI_Iallgather(s, sn, st, r, rn, rt, c, q);
}

}  // extern "C"
