#include "models/catalog.h"

#include <string>
#include <utility>
#include <vector>

namespace oomb {
const std::vector<std::pair<std::string, std::string>>& embedded_catalog_files();
}

namespace oomb::models {

namespace {
// "llm/qwen2.5-7b.json" -> kind "llm", id "qwen2.5-7b"
bool split(const std::string& rel, std::string& kind, std::string& id) {
  auto slash = rel.find('/');
  if (slash == std::string::npos || rel.size() < 5 || rel.substr(rel.size() - 5) != ".json") return false;
  kind = rel.substr(0, slash);
  id = rel.substr(slash + 1, rel.size() - slash - 1 - 5);
  return true;
}
}  // namespace

const std::string* catalog_text(const std::string& kind, const std::string& id) {
  for (const auto& [rel, text] : embedded_catalog_files()) {
    std::string k, i;
    if (split(rel, k, i) && k == kind && i == id) return &text;
  }
  return nullptr;
}

std::vector<std::string> catalog_ids(const std::string& kind) {
  std::vector<std::string> ids;
  for (const auto& [rel, text] : embedded_catalog_files()) {
    std::string k, i;
    if (split(rel, k, i) && k == kind) ids.push_back(i);
  }
  return ids;
}

}  // namespace oomb::models
