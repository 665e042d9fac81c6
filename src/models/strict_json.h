#pragma once
// Strict JSON reading for config structs: unknown keys and wrong types are errors naming the key.
#include "attnkit/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace attnkit::models {
namespace detail {

// Reads json[key] into `value` when present, with a clear error on a type mismatch; records the
// key so unknown keys can be reported afterwards.
class StrictReader {
 public:
  StrictReader(const nlohmann::json& j, std::string what) : j_(j), what_(std::move(what)) {
    if (!j.is_object()) throw Error(fmt::format("{}: expected a JSON object", what_));
  }
  template <typename T>
  void read(const char* key, T& value) {
    seen_.insert(key);
    auto it = j_.find(key);
    if (it == j_.end()) return;
    try {
      value = it->template get<T>();
    } catch (const nlohmann::json::exception&) {
      throw Error(fmt::format("{}: '{}' has the wrong type ({})", what_, key, it->dump()));
    }
  }
  void reject_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()))
        throw Error(fmt::format("{}: unknown key '{}'", what_, it.key()));
  }

 private:
  const nlohmann::json& j_;
  std::string what_;
  std::set<std::string> seen_;
};

}  // namespace detail

}  // namespace attnkit::models
