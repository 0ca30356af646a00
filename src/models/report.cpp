#include "meshnn/models/report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "meshnn/core/error.hpp"
#include "meshnn/core/mpi_utils.hpp"

namespace meshnn::models {

size_t RankTable::index(const std::string& column) const {
  const auto it = std::find(columns.begin(), columns.end(), column);
  MESHNN_CHECK(it != columns.end(), "rank table has no column '{}'", column);
  return static_cast<size_t>(it - columns.begin());
}

double RankTable::max(const std::string& column) const {
  const size_t c = index(column);
  double m = 0;
  for (const auto& row : rows) m = std::max(m, row[c]);
  return m;
}

std::string RankTable::format() const {
  auto line = [&](const std::string& label, auto&& value_of) {
    std::string out = fmt::format("{:>6}", label);
    for (size_t c = 0; c < columns.size(); ++c)
      if (shown[c]) out += fmt::format(" {:>14.3f}", value_of(c));
    return out + "\n";
  };
  std::string out = fmt::format("{:>6}", "rank");
  for (size_t c = 0; c < columns.size(); ++c)
    if (shown[c]) out += fmt::format(" {:>14}", columns[c]);
  out += "\n";
  for (size_t r = 0; r < rows.size(); ++r) out += line(std::to_string(r), [&](size_t c) { return rows[r][c]; });
  return out + line("max", [&](size_t c) { return max(columns[c]); });
}

RankTable gather_rank_table(const std::vector<RankFigure>& mine, MPI_Comm comm) {
  const int n = comm_size(comm);
  const int count = checked_mpi_count(static_cast<int64_t>(mine.size()));
  std::vector<double> values, all(mine.size() * static_cast<size_t>(n));
  RankTable t;
  for (const RankFigure& f : mine) {
    t.columns.push_back(f.name);
    t.shown.push_back(f.shown);
    values.push_back(f.value);
  }
  MESHNN_MPI_CHECK(MPI_Allgather(values.data(), count, MPI_DOUBLE, all.data(), count, MPI_DOUBLE, comm));
  for (int r = 0; r < n; ++r) t.rows.emplace_back(all.begin() + r * mine.size(), all.begin() + (r + 1) * mine.size());
  return t;
}

}  // namespace meshnn::models
