#include "meshnn/models/report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::models {

double RankTable::max(size_t column) const {
  double m = 0;
  for (const auto& row : rows) m = std::max(m, row.at(column));
  return m;
}

std::string RankTable::format() const {
  std::string out = fmt::format("{:>6}", "rank");
  for (const std::string& c : columns) out += fmt::format(" {:>14}", c);
  out += "\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    out += fmt::format("{:>6}", r);
    for (double v : rows[r]) out += fmt::format(" {:>14.3f}", v);
    out += "\n";
  }
  out += fmt::format("{:>6}", "max");
  for (size_t c = 0; c < columns.size(); ++c) out += fmt::format(" {:>14.3f}", max(c));
  return out + "\n";
}

RankTable gather_rank_table(const std::vector<std::string>& columns, const std::vector<double>& mine, MPI_Comm comm) {
  MESHNN_CHECK(mine.size() == columns.size(), "rank table: {} values for {} columns", mine.size(), columns.size());
  const int n = comm_size(comm);
  std::vector<double> all(columns.size() * static_cast<size_t>(n));
  MESHNN_MPI_CHECK(MPI_Allgather(mine.data(), checked_mpi_count(static_cast<int64_t>(mine.size())), MPI_DOUBLE,
                                 all.data(), checked_mpi_count(static_cast<int64_t>(mine.size())), MPI_DOUBLE, comm));
  RankTable t;
  t.columns = columns;
  for (int r = 0; r < n; ++r)
    t.rows.emplace_back(all.begin() + r * columns.size(), all.begin() + (r + 1) * columns.size());
  return t;
}

}  // namespace meshnn::models
