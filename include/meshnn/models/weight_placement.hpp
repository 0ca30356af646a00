// Where a weight goes on the mesh, by its role in the layer and the parallel mode: the one table
// every model family places its weights from (TT-NN's LLM guide; docs/spec/semantics.md §5), so a
// new model names roles instead of wiring mappers per mode. Linear weights are [in, out] (loaded
// transposed from Hugging Face's [out, in]); the mesh is the tensor-parallel group (hybrid: one
// submesh, so hybrid places as tp).
//
//   role              dp           tp, hybrid                2d (R x C mesh)
//   COLUMN_PARALLEL   replicated   out split over devices    in over mesh rows, out over mesh columns
//   ROW_PARALLEL      replicated   in split over devices     out over mesh rows, in over mesh columns
//   HIDDEN_VECTOR     replicated   replicated                split over mesh rows
//
// Column-parallel outputs stay split; a row-parallel linear then gives partial sums that one
// reduction finishes (2d: partial sums along one mesh axis, reduced along it). Shards are padded
// to whole tiles where the dims do not divide.
#pragma once

#include "meshnn/distributed/distribute.hpp"
#include "meshnn/models/parallel.hpp"

namespace meshnn::models {

enum class WeightRole { COLUMN_PARALLEL, ROW_PARALLEL, HIDDEN_VECTOR };

MeshMapperConfig weight_mapper(ParallelMode mode, WeightRole role);

}  // namespace meshnn::models
