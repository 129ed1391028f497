#include "client/gputunectl/table.h"

#include <algorithm>

namespace gputune::ctl {

Table::Table(std::vector<std::string> header)
    : header_(std::move(header)), right_(header_.size(), false) {}

void Table::AlignRight(size_t column) {
  if (column < right_.size()) right_[column] = true;
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size() && show_header_; ++c) {
    width[c] = header_[c].size();
  }
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const size_t pad = width[c] - row[c].size();
      const bool last = c + 1 == row.size();
      if (right_[c]) line.append(pad, ' ');
      line += row[c];
      if (!right_[c] && !last) line.append(pad, ' ');
      if (!last) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
  };
  if (show_header_) print_row(header_);
  for (const auto& row : rows_) print_row(row);
}

}  // namespace gputune::ctl
