#pragma once
// The one place where attnkit's sources differ between the LibTorch versions it builds against:
// Debian's libtorch-dev 1.13 (the default) and the torch 2.x of a Python environment
// (`make build TORCH=<python>`, docs/architecture.md "Building against LibTorch 2.x"). Like
// src/pch.h it sits outside the layers: any source that uses LibTorch may include it
// (`#include "../torch_compat.h"`); it is no public header.
#include <torch/version.h>

// LibTorch's version, e.g. 113 for 1.13, 215 for 2.15.
#define ATTNKIT_TORCH_VERSION (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)

// c10d's Gloo backend (data-parallel training, src/train/distributed.cpp). LibTorch's usage
// requirements define USE_C10D_GLOO where its ProcessGroupGloo.hpp can be compiled: Debian's
// (with libgloo-dev). A PyPI wheel ships ProcessGroupGloo.hpp but not the Gloo headers it includes
// (its Gloo is linked into libtorch_cpu.so, at a commit no Debian package matches), so that build
// leaves USE_C10D_GLOO out and DataParallel refuses with one line.
#if defined(USE_C10D_GLOO)
#define ATTNKIT_HAVE_C10D_GLOO 1
#else
#define ATTNKIT_HAVE_C10D_GLOO 0
#endif
