// The per-rank figures every model job prints: one row per rank, gathered to every rank, with a
// "max" row (the slowest rank sets a collective job's pace). Model-agnostic.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace meshnn::models {

struct RankFigure {
  std::string name;   // column header, e.g. "prefill s"
  double value = 0;
  bool shown = true;  // false: carried for the job's own sums, not printed
};

struct RankTable {
  std::vector<std::string> columns;
  std::vector<bool> shown;
  std::vector<std::vector<double>> rows;  // rows[rank][column]

  size_t index(const std::string& column) const;  // throws meshnn::Error for an unknown column
  double value(size_t rank, const std::string& column) const { return rows.at(rank).at(index(column)); }
  double max(const std::string& column) const;    // over ranks
  std::string format() const;  // aligned text of the shown columns, one line per rank, then the max row
};

// Gathers every rank's figures (the same names in the same order on every rank). Collective over
// comm. Control-plane numbers for a report, not tensor data, so MPI's own allgather carries them.
RankTable gather_rank_table(const std::vector<RankFigure>& mine, MPI_Comm comm);

}  // namespace meshnn::models
