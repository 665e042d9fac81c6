#pragma once
// make_model: a models::Model (model.h) of any shape from its description, the JSON object that
// attnkit config.json files and checkpoint metadata carry (Model::config_description).
#include "attnkit/models/encoder_decoder.h"
#include "attnkit/models/model.h"
#include "attnkit/models/task_model.h"

#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attnkit::models {

// The layer stacks a description builds, each with the task heads over it (none for the
// encoder-decoder's stacks): what a check before any allocation looks at.
struct StackDescription {
  TransformerConfig config;
  HeadsConfig heads;
};
using DescriptionCheck = std::function<void(const std::vector<StackDescription>&)>;

// A model from its description (Model::config_description's form; `where` names the file in
// errors). `check`, when given, sees the parsed configs before anything is allocated (and may
// throw). Throws attnkit::Error "WHERE: ..." for an unknown architecture or an invalid config.
std::shared_ptr<Model> make_model(const nlohmann::json& description, const std::string& where,
                                  const DescriptionCheck& check = {});

}  // namespace attnkit::models
