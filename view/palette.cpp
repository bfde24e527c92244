#include "view/palette.h"

#include <cstdio>
#include <iterator>
#include <map>

namespace oomb::view {

namespace {

constexpr Rgb kBlue{78, 121, 167}, kOrange{242, 142, 43}, kRed{225, 87, 89}, kTeal{118, 183, 178},
    kGreen{89, 161, 79}, kYellow{237, 201, 72}, kPurple{176, 122, 161}, kPink{255, 157, 167}, kBrown{156, 117, 95},
    kGrey{186, 176, 172}, kSky{95, 160, 220}, kLime{160, 200, 90};
// What a name that is none of the known ones gets (its FNV-1a hash picks one).
constexpr Rgb kOthers[] = {kOrange, {160, 203, 232}, {211, 114, 149}, kGrey, {134, 188, 182}, {255, 190, 125}, kSky};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

Rgb op_color(const std::string& op) {
  static const std::map<std::string, Rgb> known = {
      {"embedding", kBrown},          {"embedding_bwd", kBrown},        {"stage1", kBlue},
      {"layer_fwd", kBlue},           {"layer_recompute", kTeal},       {"lm_head", kPurple},
      {"loss", kPurple},              {"stage2", kRed},                 {"layer_bwd", kRed},
      {"optimizer", kLime},           {"optimizer_step", kLime},        {"gradient_allreduce", kGreen},
      {"gradient_reduce_scatter", kGreen}, {"weight_all_gather", kGreen}, {"selection", kPink},
      {"kv", kGreen},                 {"dkv", kYellow}};
  if (const auto it = known.find(op); it != known.end()) return it->second;
  if (op.rfind("dkv", 0) == 0 || op.find("d2h") != std::string::npos) return kYellow;  // write-backs
  if (op.rfind("kv", 0) == 0 || op.find("h2d") != std::string::npos) return kGreen;    // onloads
  return kOthers[fnv1a(op) % std::size(kOthers)];
}

Rgb category_color(const std::string& c) {
  static const std::map<std::string, Rgb> known = {
      {"weights", kBlue},           {"parameter_gradients", kOrange}, {"optimizer_state", kRed},
      {"checkpoints", kTeal},       {"layer_working_set", kGreen},    {"logits", kYellow},
      {"attention_workspace", kPurple}, {"kv_pages", kPink},          {"kv_grad_pages", kBrown},
      {"page_summaries", kGrey},    {"selection_scores", kSky},       {"page_tables", kLime},
      {"runtime_reserve", {110, 110, 120}}, {"allocator", {140, 140, 150}}};
  if (const auto it = known.find(c); it != known.end()) return it->second;
  return kOthers[fnv1a(c) % std::size(kOthers)];
}

std::string hex(Rgb c) {
  char s[8];
  std::snprintf(s, sizeof s, "#%02x%02x%02x", c.r, c.g, c.b);
  return s;
}

}  // namespace oomb::view
