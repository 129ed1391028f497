// Table: aligned text columns for people (gputunectl without --json).
//
//   Table t({"KEY", "STATE", "SPEEDUP"});
//   t.AlignRight(2);
//   t.AddRow({"dense_bf16/...", "hit", "1.31x"});
//   t.Print(std::cout);
#ifndef GPUTUNE_CLIENT_GPUTUNECTL_TABLE_H_
#define GPUTUNE_CLIENT_GPUTUNECTL_TABLE_H_

#include <ostream>
#include <string>
#include <vector>

namespace gputune::ctl {

class Table {
 public:
  explicit Table(std::vector<std::string> header);

  // Numbers read better right-aligned.
  void AlignRight(size_t column);
  // Field/value lists read better without a header line.
  void HideHeader() { show_header_ = false; }
  // Missing cells print empty; extra cells are an error of the caller.
  void AddRow(std::vector<std::string> row);
  size_t rows() const { return rows_.size(); }

  // Header and rows, columns separated by two spaces, no trailing blanks.
  void Print(std::ostream& out) const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  bool show_header_ = true;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace gputune::ctl

#endif  // GPUTUNE_CLIENT_GPUTUNECTL_TABLE_H_
