// Precompiled header for every translation unit that uses LibTorch (see CMakeLists.txt).
// Public headers must NOT include torch/torch.h; only sources get it through this file.
#pragma once
#include <torch/torch.h>
