"""Build of the Python package `attnkit` (docs/python.md): `pip install --no-build-isolation .`

One C++ extension, attnkit/_kernels*.so, compiled with torch.utils.cpp_extension against the torch of
the environment it is installed into (hence --no-build-isolation: pip must not build against a
second, freshly downloaded torch). It holds only what the ops need: the torch.library
registration (src/torch_ops/package_ops.cpp) and the kernels' GEMM through ATen
(src/torch_ops/package_gemm.cpp), the op implementations it calls (src/ops/*.cpp, part),
the fused CPU kernels (src/ops/cpu/*.cpp) and three files of src/base. Nothing else of the CMake
build (no CLI, no Gloo, no fmt/RE2/utf8proc libraries: fmt comes header-only with torch's headers).

Per-file flags, as the CMake build has them:
  src/ops/*.cpp, src/torch_ops/package_*.cpp   -include src/pch.h (torch/torch.h, CMake's
                         precompiled header, which some of these files rely on)
  src/ops/cpu/*.cpp      -O3 -ffp-contract=fast -fno-trapping-math (each kernel entry point still carries its
                         baseline / AVX2 / AVX-512 copies through GCC target attributes,
                         src/ops/cpu/kernel_isa.h, so no -march is needed)
  src/ops/cpu/blas.cpp   -DATTNKIT_GEMM_ATEN: leaves gemm() to src/torch_ops/package_gemm.cpp
                         (ATen's addmm; a wheel's static MKL need not export the Fortran sgemm_
                         that the CMake build calls)
  src/ops/cpu/parallel.cpp -fopenmp, linked against the libgomp that `import torch` loaded (a
                         wheel's torch/lib/libgomp.so.1), never a second OpenMP runtime; a torch
                         without libgomp (e.g. an Intel-OpenMP or macOS build) gets a serial loop.
"""
import glob
import os
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("attnkit: building needs PyTorch (>= 2.7) in this environment; install it first and "
             "run `pip install --no-build-isolation .`")

ROOT = os.path.dirname(os.path.abspath(__file__))
os.chdir(ROOT)  # setuptools wants source paths relative to setup.py
# Build outputs in build-python/ (build/ is the CMake build's folder).
BUILD_BASE = "build-python"
os.makedirs(BUILD_BASE, exist_ok=True)

OP_SOURCES = [f"src/ops/{name}.cpp" for name in (
    "checks", "cosformer_attention", "feature_attention", "flash_attention",
    "fused_feature_attention", "linear_attention", "masks", "recurrent", "softmax_attention")]
BASE_SOURCES = [f"src/base/{name}.cpp" for name in ("attention_kind", "error", "parse")]
KERNEL_SOURCES = sorted(glob.glob("src/ops/cpu/*.cpp"))
SOURCES = (["src/torch_ops/package_ops.cpp", "src/torch_ops/package_gemm.cpp"] + OP_SOURCES +
           BASE_SOURCES + KERNEL_SOURCES)

KERNEL_FLAGS = ["-O3", "-ffp-contract=fast", "-fno-trapping-math"]


def torch_openmp_runtime():
    """The GNU OpenMP runtime `import torch` loaded (a pip wheel's torch/lib/libgomp.so.1, or the
    system's for a distribution build), read from /proc/self/maps; None when torch loaded none."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if os.path.basename(path).startswith("libgomp") and ".so" in path:
                    return path
    except OSError:
        pass
    found = sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "lib", "libgomp*.so*")))
    return found[0] if found else None


TORCH_OPENMP = torch_openmp_runtime()
PER_FILE_FLAGS = {path: list(KERNEL_FLAGS) for path in KERNEL_SOURCES}
# The LibTorch units get torch/torch.h first, as the CMake build's precompiled header gives it
# (src/pch.h; some sources rely on it).
for path in OP_SOURCES + ["src/torch_ops/package_ops.cpp", "src/torch_ops/package_gemm.cpp"]:
    PER_FILE_FLAGS[path] = ["-include", os.path.join(ROOT, "src", "pch.h")]
PER_FILE_FLAGS["src/ops/cpu/blas.cpp"].append("-DATTNKIT_GEMM_ATEN")
if TORCH_OPENMP:
    PER_FILE_FLAGS["src/ops/cpu/parallel.cpp"].append("-fopenmp")


class BuildWithPerFileFlags(BuildExtension):
    """torch's BuildExtension, plus the per-file flags above (compiled one file at a time)."""

    def build_extension(self, ext):
        compile_one = self.compiler._compile

        def with_file_flags(obj, src, ext_name, cc_args, extra_postargs, pp_opts):
            flags = PER_FILE_FLAGS.get(os.path.relpath(os.path.abspath(src), ROOT).replace(os.sep, "/"))
            if flags:
                if isinstance(extra_postargs, dict):
                    extra_postargs = dict(extra_postargs)
                    extra_postargs["cxx"] = list(extra_postargs.get("cxx", [])) + flags
                else:
                    extra_postargs = list(extra_postargs or []) + flags
            return compile_one(obj, src, ext_name, cc_args, extra_postargs, pp_opts)

        self.compiler._compile = with_file_flags
        try:
            super().build_extension(ext)
        finally:
            self.compiler._compile = compile_one


setup(
    name="attnkit",
    version="0.1.0",
    description="attnkit's fused CPU attention kernels (flash softmax, linear, cosFormer) as "
                "PyTorch custom ops, drop-in modules and a Hugging Face attention backend",
    package_dir={"": "python"},
    packages=["attnkit"],
    python_requires=">=3.9",
    install_requires=["torch>=2.7"],
    ext_modules=[
        CppExtension(
            name="attnkit._kernels",
            sources=SOURCES,
            include_dirs=[os.path.join(ROOT, "include"), os.path.join(ROOT, "src")],
            define_macros=[("FMT_HEADER_ONLY", None), ("ATTNKIT_PYTHON_PACKAGE", None)],
            extra_compile_args=["-O2", "-DNDEBUG", "-g0"],
            # torch's own OpenMP runtime by path: its soname (libgomp.so.1) is the one `import torch`
            # already loaded, so the loader binds this library to that runtime, never a second one.
            extra_link_args=([TORCH_OPENMP] if TORCH_OPENMP else []) + ["-g0"],
            py_limited_api=False,
        )
    ],
    cmdclass={"build_ext": BuildWithPerFileFlags.with_options(use_ninja=False)},
    options={"build": {"build_base": BUILD_BASE}, "egg_info": {"egg_base": BUILD_BASE}},
    zip_safe=False,
)
