// Empty: this translation unit exists so that the attnkit_pch target builds the precompiled
// LibTorch header (src/pch.h) that every LibTorch target reuses (CMakeLists.txt).
