#include "models/lookup.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "core/json.h"
#include "models/catalog.h"

namespace oomb::models {

std::string normalized_id(const std::string& s) {
  std::string r;
  for (char c : s)
    if (c != '-' && c != '_' && c != '.' && c != ' ') r += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

int edit_distance(const std::string& a, const std::string& b) {
  std::vector<int> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::vector<std::string> catalog_aliases(const std::string& kind, const std::string& id) {
  const std::string* text = catalog_text(kind, id);
  if (!text) return {};
  const Json j = parse_json(*text, "catalog " + kind + "/" + id + ".json");
  std::vector<std::string> out;
  if (j.is_object() && j.contains("aliases") && j["aliases"].is_array())
    for (const auto& a : j["aliases"])
      if (a.is_string()) out.push_back(a.get<std::string>());
  return out;
}

std::string resolve_catalog_id(const std::string& kind, const std::string& typed) {
  const std::vector<std::string> ids = catalog_ids(kind);
  if (std::find(ids.begin(), ids.end(), typed) != ids.end()) return typed;
  const std::string n = normalized_id(typed);
  if (n.empty()) return {};
  // Ids and aliases in one pass: a normalised form that two different entries share is ambiguous.
  std::string found;
  for (const auto& id : ids) {
    bool match = normalized_id(id) == n;
    for (const auto& a : catalog_aliases(kind, id)) match = match || normalized_id(a) == n;
    if (!match) continue;
    if (!found.empty() && found != id) return {};
    found = id;
  }
  return found;
}

namespace {
// How far `name` is from what was typed (both normalised): the edit distance, with a typed prefix
// of a longer id ("qwen2.5" of "qwen2.5-7b") as close as one typo; the raw distance breaks ties.
// nullopt when too far to be a plausible typo.
std::optional<std::pair<int, int>> score(const std::string& t, const std::string& name) {
  const std::string cn = normalized_id(name);
  const int raw = edit_distance(t, cn);
  int d = raw;
  if (!t.empty() && cn.rfind(t, 0) == 0) d = std::min(d, 1);
  const int allowed = std::max<int>(2, static_cast<int>(std::max(t.size(), cn.size())) / 3);
  if (d > allowed) return std::nullopt;
  return std::make_pair(d, raw);
}

std::vector<std::string> nearest(std::vector<std::pair<std::pair<int, int>, std::string>> scored, size_t n) {
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [d, c] : scored)
    if (out.size() < n && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  return out;
}
}  // namespace

std::vector<std::string> closest_ids(const std::string& typed, const std::vector<std::string>& candidates, size_t n) {
  const std::string t = normalized_id(typed);
  std::vector<std::pair<std::pair<int, int>, std::string>> scored;
  for (const auto& c : candidates)
    if (auto d = score(t, c)) scored.emplace_back(*d, c);
  return nearest(std::move(scored), n);
}

std::vector<std::string> closest_catalog_ids(const std::string& kind, const std::string& typed, size_t n) {
  // Each entry scores its best of its id and its aliases; the id is what is suggested.
  const std::string t = normalized_id(typed);
  std::vector<std::pair<std::pair<int, int>, std::string>> scored;
  for (const auto& id : catalog_ids(kind)) {
    std::vector<std::string> names = catalog_aliases(kind, id);
    names.push_back(id);
    std::optional<std::pair<int, int>> best;
    for (const auto& name : names)
      if (auto d = score(t, name); d && (!best || *d < *best)) best = d;
    if (best) scored.emplace_back(*best, id);
  }
  return nearest(std::move(scored), n);
}

}  // namespace oomb::models
