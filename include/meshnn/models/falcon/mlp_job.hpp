// The inference job behind meshnn-mlp: load (or generate) a Falcon MLP, place the input, run the
// forward pass on the mesh, report times, accuracy against the single-device result, and write
// the output. Collective over MPI_COMM_WORLD; every error is the same on every rank.
#pragma once

#include <optional>
#include <string>

#include "meshnn/models/falcon/mlp.hpp"

namespace meshnn::models::falcon {

struct MlpJobConfig {
  MeshShape mesh{1, 2};
  MlpOptions mlp;
  std::string weights;  // empty: generate a synthetic model of hidden x intermediate
  int layer = -1;       // -1: bare MLP block; i: transformer.h.{i}.mlp.* of a checkpoint
  int64_t hidden = 4544, intermediate = 18176;  // for a generated model
  std::string input;    // empty: generate [batch, seq, hidden]
  std::string output;   // empty: don't write
  std::string json;     // empty: no JSON record
  int64_t batch = 1, seq = 128;
  uint64_t seed = 1234;
  int warmup = 1, iterations = 3;
  bool check = false;
  std::string calibration;  // the planned tp variant's cost model (empty: calibrated at start)
};

// Runs the job; returns the process exit status (0, or 1 when --check found a mismatch).
int run_mlp_job(const MlpJobConfig& config);

}  // namespace meshnn::models::falcon
