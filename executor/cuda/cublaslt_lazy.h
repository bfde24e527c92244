// cuBLASLt is loaded on first use, not linked (cublaslt_lazy.cpp says why): these say whether it
// has been loaded in this process and, once a call tried, why it could not be.
#pragma once

#include <cstddef>
#include <string>

namespace oomb::cuda {

// True once any cuBLASLt entry point has been called and the library loaded.
bool cublaslt_loaded();

// Through the forwarding entry points (so tests need no CUDA headers): the library's version and
// a status code's name. Each loads the library on first use.
size_t cublaslt_version();
std::string cublaslt_status_name(int status);

// Empty when the library loads; else what dlopen said for each path tried. Loads it.
std::string cublaslt_load_error();

}  // namespace oomb::cuda
