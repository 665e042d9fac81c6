#include "attnkit/version.h"

namespace attnkit {
std::string version() { return ATTNKIT_VERSION; }
}  // namespace attnkit
