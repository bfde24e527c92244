#pragma once
// The embedded catalog: JSON text of every spec under models/{llm,gpu,host}, keyed by kind and id.
#include <string>
#include <vector>

namespace oomb::models {

// kind: "llm", "gpu" or "host". Returns nullptr when the id is not in the catalog.
const std::string* catalog_text(const std::string& kind, const std::string& id);
std::vector<std::string> catalog_ids(const std::string& kind);

}  // namespace oomb::models
