#include <fmt/format.h>

#include <algorithm>

#include "meshnn/mesh/mesh_device.hpp"

namespace meshnn {
namespace {

std::string repeat(const char* piece, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += piece;
  return out;
}

std::string centered(const std::string& text, size_t width) {
  const size_t left = (width - text.size()) / 2;
  return std::string(left, ' ') + text + std::string(width - text.size() - left, ' ');
}

std::string border(const char* left, const char* middle, const char* right, int cols, size_t width) {
  std::string line = left;
  for (int c = 0; c < cols; ++c) line += repeat("─", width) + (c + 1 < cols ? middle : right);
  return line + "\n";
}

}  // namespace

std::string draw_mesh_table(MeshShape shape, const std::string& title,
                            const std::function<std::vector<std::string>(int)>& cell_lines) {
  // TT-NN draws 15-character cells; wider content widens every cell alike.
  size_t width = 15;
  size_t lines_per_cell = 0;
  std::vector<std::vector<std::string>> cells;
  for (int id = 0; id < shape.num_devices(); ++id) {
    cells.push_back(cell_lines(id));
    lines_per_cell = std::max(lines_per_cell, cells.back().size());
    for (const std::string& line : cells.back()) width = std::max(width, line.size() + 4);
  }
  std::string out = "   " + title + "\n" + border("┌", "┬", "┐", shape.cols, width);
  for (int r = 0; r < shape.rows; ++r) {
    for (size_t l = 0; l < lines_per_cell; ++l) {
      out += "│";
      for (int c = 0; c < shape.cols; ++c) {
        const auto& cell = cells[static_cast<size_t>(r * shape.cols + c)];
        out += centered(l < cell.size() ? cell[l] : "", width) + "│";
      }
      out += "\n";
    }
    out += r + 1 < shape.rows ? border("├", "┼", "┤", shape.cols, width) : border("└", "┴", "┘", shape.cols, width);
  }
  return out;
}

std::string visualize_mesh_device(MeshShape shape) {
  return draw_mesh_table(shape, fmt::format("MeshDevice(rows={}, cols={}):", shape.rows, shape.cols), [&](int id) {
    return std::vector<std::string>{fmt::format("Dev. ID: {}", id),
                                    MeshCoordinate{id / shape.cols, id % shape.cols}.to_string()};
  });
}

std::string visualize_mesh_device(const MeshDevice& mesh) { return visualize_mesh_device(mesh.shape()); }

}  // namespace meshnn
