// Which kernels the replayed graphs make programmatic edges into
// (backends/cuda/cuda_programmatic_edges.hpp), without a GPU: the rule by the
// kernel's mangled name under each setting. test_cuda_pdl checks on a GPU that
// the kernels it accepts do wait; tests/lint/kernels_wait.py that dmuon's do.
#include <gtest/gtest.h>

#include <string>

#include "backends/cuda/cuda_programmatic_edges.hpp"

namespace {

using dmuon::ProgrammaticEdges;
using dmuon::waits_for_prerequisites;

// Names as the runtime gives them: dmuon's own (one in an anonymous namespace,
// one a template), cuBLAS's run-time nvjet GEMM, a static cuBLAS kernel that
// does not wait, and a program's kernel at global scope.
const std::string kDmuonAdam =
    "_ZN5dmuon45_GLOBAL__N__2a2910d4_12_cuda_adam_cu_8d79763a11adam_kernelIfLi1EEEvPT_PKS2_PfS6_S6_PKNS_9AdamChunkEPKNS_"
    "13AdamScalarRowEPlPiPKNS_9StepStatsEPSF_if";
const std::string kDmuonSumsq = "_ZN5dmuon45_GLOBAL__N__2a2910d4_12_cuda_adam_cu_8d79763a13sumsq_partialItEEvPKT_lPd";
const std::string kNvjet = "nvjet_sm90_hsh_128x64_64x6_2x1_v_bz_coopA_NNT";
const std::string kGemv = "_Z10gemv2N_kernelIii13__nv_bfloat16S0_ffLi128ELi4ELi4ELi4ELi1ELb0EEvT4_";
const std::string kUserKernel = "_Z11user_kernelPf";

TEST(ProgrammaticEdgeRule, NoneAcceptsNothing) {
  for (const std::string& k : {kDmuonAdam, kDmuonSumsq, kNvjet, kGemv, kUserKernel})
    EXPECT_FALSE(waits_for_prerequisites(k, ProgrammaticEdges::none)) << k;
}

TEST(ProgrammaticEdgeRule, TheDefaultAcceptsDmuonsKernelsOnly) {
  EXPECT_TRUE(waits_for_prerequisites(kDmuonAdam, ProgrammaticEdges::into_dmuon_kernels));
  EXPECT_TRUE(waits_for_prerequisites(kDmuonSumsq, ProgrammaticEdges::into_dmuon_kernels));
  for (const std::string& k : {kNvjet, kGemv, kUserKernel})
    EXPECT_FALSE(waits_for_prerequisites(k, ProgrammaticEdges::into_dmuon_kernels)) << k;
}

TEST(ProgrammaticEdgeRule, IntoCublasAddsItsNvjetKernelsOnly) {
  for (const std::string& k : {kDmuonAdam, kDmuonSumsq, kNvjet})
    EXPECT_TRUE(waits_for_prerequisites(k, ProgrammaticEdges::into_dmuon_and_cublas_kernels)) << k;
  for (const std::string& k : {kGemv, kUserKernel})
    EXPECT_FALSE(waits_for_prerequisites(k, ProgrammaticEdges::into_dmuon_and_cublas_kernels)) << k;
}

TEST(ProgrammaticEdgeRule, AnUnnamedKernelIsNeverAccepted) {
  for (ProgrammaticEdges which : {ProgrammaticEdges::none, ProgrammaticEdges::into_dmuon_kernels,
                                  ProgrammaticEdges::into_dmuon_and_cublas_kernels})
    EXPECT_FALSE(waits_for_prerequisites("", which));
}

}  // namespace
