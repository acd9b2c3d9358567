// Replicated parameters: the same values on every rank. Adam parameters are
// replicated and never re-synchronised by a step (each rank applies the same
// averaged update to its own copy), so copies initialised differently stay
// different; a checkpoint would then stitch one rank's share to another's.
#pragma once
#include "core/optimizer.hpp"

namespace dmuon {

// Collective: every parameter (Muon and Adam, every dtype) takes the values
// of rank `root`'s copy (dmuon_broadcast_params).
void broadcast_params(Optimizer& opt, int root);

// Collective: throws DMUON_ERR_REPLICAS_DIFFER on every rank when some Adam
// parameter differs between ranks, naming the first one and two ranks that
// hold different values (dmuon_check_replicas, and before every save). One
// 64-bit hash per parameter, compared by a MIN and a MAX all-reduce.
void check_replicas(Optimizer& opt, const char* call);

// A hash of `bytes` that tells apart any two inputs differing in one 8-byte
// word (each step is a bijection of the running state); not cryptographic.
uint64_t replica_hash(const void* data, std::size_t bytes);

}  // namespace dmuon
