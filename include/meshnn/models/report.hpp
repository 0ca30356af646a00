// The per-rank figures every model job prints: one row per rank, gathered to every rank, with a
// "max" row (the slowest rank sets a collective job's pace). Model-agnostic.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace meshnn::models {

struct RankTable {
  std::vector<std::string> columns;       // headers, e.g. "prefill s"
  std::vector<std::vector<double>> rows;  // rows[rank][column]
  double max(size_t column) const;        // over ranks
  std::string format() const;             // aligned text, one line per rank, then the max row
};

// Gathers every rank's figures (same columns on every rank). Collective over comm. Control-plane
// numbers for a report, not tensor data, so MPI's own allgather carries them.
RankTable gather_rank_table(const std::vector<std::string>& columns, const std::vector<double>& mine, MPI_Comm comm);

}  // namespace meshnn::models
