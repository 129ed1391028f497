#include "kernels/dense.h"

#include <charconv>
#include <string>
#include <string_view>

namespace gputune::kernels {
namespace {

constexpr std::string_view kWorkspaceKey = "workspace_bytes=";

bool IsNameChar(char c, bool kernel) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
      (c >= '0' && c <= '9') || c == '_') {
    return true;
  }
  return kernel && (c == '.' || c == '-' || c == ':');
}

// A cursor over the text being parsed; every Take* skips leading spaces.
class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}

  bool AtEnd() {
    SkipSpaces();
    return text_.empty();
  }

  bool TakeChar(char c) {
    SkipSpaces();
    if (text_.empty() || text_.front() != c) return false;
    text_.remove_prefix(1);
    return true;
  }

  bool TakePrefix(std::string_view prefix) {
    SkipSpaces();
    if (!text_.starts_with(prefix)) return false;
    text_.remove_prefix(prefix.size());
    return true;
  }

  std::string_view TakeName(bool kernel) {
    SkipSpaces();
    size_t n = 0;
    while (n < text_.size() && IsNameChar(text_[n], kernel)) ++n;
    std::string_view name = text_.substr(0, n);
    text_.remove_prefix(n);
    return name;
  }

  template <typename Int>
  bool TakeInt(Int* value) {
    SkipSpaces();
    const char* end = text_.data() + text_.size();
    auto [ptr, ec] = std::from_chars(text_.data(), end, *value);
    if (ec != std::errc()) return false;
    text_.remove_prefix(static_cast<size_t>(ptr - text_.data()));
    return true;
  }

 private:
  void SkipSpaces() {
    while (!text_.empty() && text_.front() == ' ') text_.remove_prefix(1);
  }

  std::string_view text_;
};

}  // namespace

std::string Execution::ToString() const {
  std::string out = kernel + "(";
  bool first = true;
  for (const auto& [name, value] : params) {
    if (!first) out += ",";
    first = false;
    out += name + "=" + std::to_string(value);
  }
  out += ")";
  if (workspace_bytes != 0) {
    out += " ";
    out += kWorkspaceKey;
    out += std::to_string(workspace_bytes);
  }
  return out;
}

std::optional<Execution> ParseExecution(std::string_view text) {
  Reader in(text);
  Execution exec;
  exec.kernel = std::string(in.TakeName(/*kernel=*/true));
  if (exec.kernel.empty()) return std::nullopt;
  if (in.TakeChar('(') && !in.TakeChar(')')) {
    do {
      const std::string name(in.TakeName(/*kernel=*/false));
      int64_t value = 0;
      if (name.empty() || !in.TakeChar('=') || !in.TakeInt(&value) ||
          !exec.params.emplace(name, value).second) {
        return std::nullopt;
      }
    } while (in.TakeChar(','));
    if (!in.TakeChar(')')) return std::nullopt;
  }
  if (in.TakePrefix(kWorkspaceKey) && !in.TakeInt(&exec.workspace_bytes)) {
    return std::nullopt;
  }
  if (!in.AtEnd()) return std::nullopt;
  return exec;
}

}  // namespace gputune::kernels
