#include "vocabulary_json.h"

namespace attnkit::text::detail {

nlohmann::ordered_json vocabulary_to_json(const Vocabulary& vocabulary) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  auto& object = out.get_ref<nlohmann::ordered_json::object_t&>();
  // Tokens are unique, so append to the underlying vector instead of ordered_map's linear-time
  // key lookup per insertion (quadratic for a 50k-token vocabulary).
  auto& entries = static_cast<nlohmann::ordered_json::object_t::Container&>(object);
  const auto all = vocabulary.entries();
  entries.reserve(all.size());
  for (const auto& [token, id] : all) entries.emplace_back(token, id);
  return out;
}

}  // namespace attnkit::text::detail
