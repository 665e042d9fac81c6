# LibTorch from the torch package of a Python environment (`make build TORCH=<python>`,
# -DATTNKIT_TORCH_PYTHON=<python>; docs/architecture.md, "Building against LibTorch 2.x").
#
# The PyPI wheels are CUDA builds: their TorchConfig.cmake (through Caffe2Config.cmake) requires a
# CUDA toolkit (nvcc, headers) even to link the CPU libraries, and this machine has none. attnkit
# uses the CPU side only, so this module describes the wheel's CPU libraries directly, the way its
# own Caffe2Targets.cmake describes the torch_cpu target: the wheel's include/ dirs, its compile
# definitions, C++20 (which LibTorch 2.x headers require), and libtorch_cpu.so + libc10.so. The
# CUDA libraries that libtorch_cpu.so itself needs (libcudart, libcupti from the nvidia-* wheels)
# are found at link and run time through that library's own RPATH.
#
# Sets, like find_package(Torch) + find_package(BLAS) do for Debian's LibTorch:
#   TORCH_LIBRARIES       the interface target attnkit_libtorch
#   TORCH_CXX_FLAGS       (empty)
#   TORCH_VERSION         the package's version, e.g. 2.15.0+cu132
#   BLAS_LIBRARIES        (empty: sgemm_ comes from the MKL that libtorch_cpu.so exports; linking
#                         Debian's OpenBLAS too would put two sgemm_ in one process)
#   ATTNKIT_TORCH_LIB_DIR the wheel's lib/ (libgomp.so.1 for the kernels' OpenMP loop)
execute_process(
  COMMAND ${ATTNKIT_TORCH_PYTHON} -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__)"
  OUTPUT_VARIABLE _out RESULT_VARIABLE _rc ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "attnkit: ${ATTNKIT_TORCH_PYTHON} cannot import torch: ${_err}")
endif()
string(REPLACE "\n" ";" _out "${_out}")
list(GET _out 0 _torch_dir)
list(GET _out 1 TORCH_VERSION)
if(TORCH_VERSION VERSION_LESS 2.7)
  message(FATAL_ERROR "attnkit: torch ${TORCH_VERSION} from ${ATTNKIT_TORCH_PYTHON}: need 2.7 or "
                      "later (the first PyPI wheels built with the C++11 ABI, like this compiler)")
endif()
set(ATTNKIT_TORCH_LIB_DIR ${_torch_dir}/lib)
foreach(_lib torch_cpu c10)
  if(NOT EXISTS ${ATTNKIT_TORCH_LIB_DIR}/lib${_lib}.so)
    message(FATAL_ERROR "attnkit: ${ATTNKIT_TORCH_LIB_DIR}/lib${_lib}.so missing")
  endif()
endforeach()

# The wheel's include/ also carries the fmt 12 headers it builds with (header-only: libc10.so
# exports no fmt symbol). attnkit links Debian's libfmt (9), so its fmt/ directory comes first,
# through a folder in the build tree that holds only a link to it.
set(_fmt_shim ${CMAKE_BINARY_DIR}/torch-wheel-fmt)
find_path(ATTNKIT_FMT_INCLUDE_DIR fmt/core.h REQUIRED)
file(MAKE_DIRECTORY ${_fmt_shim})
file(CREATE_LINK ${ATTNKIT_FMT_INCLUDE_DIR}/fmt ${_fmt_shim}/fmt SYMBOLIC)
add_library(attnkit_libtorch INTERFACE)
target_include_directories(attnkit_libtorch SYSTEM INTERFACE
    ${_fmt_shim} ${_torch_dir}/include ${_torch_dir}/include/torch/csrc/api/include)
# torch_cpu's definitions in the wheel's Caffe2Targets.cmake. USE_C10D_GLOO is left out: the wheel
# ships c10d's ProcessGroupGloo.hpp but not the Gloo headers it includes (see ATTNKIT_HAVE_GLOO).
target_compile_definitions(attnkit_libtorch INTERFACE USE_DISTRIBUTED USE_RPC USE_TENSORPIPE)
target_link_libraries(attnkit_libtorch INTERFACE
    ${ATTNKIT_TORCH_LIB_DIR}/libtorch_cpu.so ${ATTNKIT_TORCH_LIB_DIR}/libc10.so)
set(TORCH_LIBRARIES attnkit_libtorch)
set(TORCH_CXX_FLAGS "")
set(BLAS_LIBRARIES "")
# Executables and libraries find libtorch_cpu.so (and its libgomp.so.1) in the wheel at run time.
list(APPEND CMAKE_BUILD_RPATH ${ATTNKIT_TORCH_LIB_DIR})
message(STATUS "attnkit: LibTorch ${TORCH_VERSION} from ${_torch_dir} (CPU libraries only)")
