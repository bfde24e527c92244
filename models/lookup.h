#pragma once
// Catalog ids as people type them: "Qwen2.5-7B", "qwen2_5_7b", "H200", "h100" (an alias the catalog
// declares) all name one entry; anything else gets the closest ids as "did you mean".
#include <string>
#include <vector>

namespace oomb::models {

// Lower case without '-', '_' and '.': the form ids are compared in.
std::string normalized_id(const std::string& s);

// Edit distance (insert, delete, substitute) between two strings.
int edit_distance(const std::string& a, const std::string& b);

// The catalog id of `kind` ("llm", "gpu", "host") that `typed` names: exact, then normalised
// (case, '-', '_', '.'), then an alias listed in the entry's "aliases". Empty when none matches or
// when the normalised form is ambiguous.
std::string resolve_catalog_id(const std::string& kind, const std::string& typed);

// Up to `n` of `candidates` closest to `typed` (normalised edit distance, also against aliases
// when `kind` is given), nearest first; only those close enough to be a plausible typo.
std::vector<std::string> closest_ids(const std::string& typed, const std::vector<std::string>& candidates,
                                     size_t n = 3);
std::vector<std::string> closest_catalog_ids(const std::string& kind, const std::string& typed, size_t n = 3);

// The aliases an entry declares (its "aliases" array; empty when none).
std::vector<std::string> catalog_aliases(const std::string& kind, const std::string& id);

}  // namespace oomb::models
