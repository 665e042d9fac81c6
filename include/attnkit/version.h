#pragma once
#include <string>

namespace attnkit {
// Version string of the library, e.g. "0.1.0".
std::string version();
}  // namespace attnkit
