// A job's steps that can fail on some ranks only (a file one rank writes or reads, a request one
// replica serves) made to fail on every rank alike: the failure is agreed on over the whole mesh
// (agree_on_failure) and every rank throws the same meshnn::Error, so no rank is left waiting in a
// collective for a peer that has given up (the error rules in core/error.hpp).
#pragma once

#include <string>

#include "meshnn/core/mpi_utils.hpp"
#include "meshnn/mesh/mesh_device.hpp"

namespace meshnn::models {

// Runs fn on device 0 only; every rank learns whether it failed, and throws alike.
template <class Fn>
void on_root(const MeshDevice& mesh, const std::string& what, Fn&& fn) {
  run_agreed(mesh.comm(), what, [&] {
    if (mesh.device_id() == 0) fn();
  });
}

// Runs fn on every rank; a failure on any of them becomes the same error everywhere.
template <class Fn>
void on_every_rank(const MeshDevice& mesh, const std::string& what, Fn&& fn) {
  run_agreed(mesh.comm(), what, fn);
}

}  // namespace meshnn::models
