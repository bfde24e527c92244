#pragma once
// Row-major Eigen maps over raw fp32 buffers (internal to the CPU backend).
#include <Eigen/Core>
#include <cstdint>

namespace oomb::executor::cpu {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapM = Eigen::Map<RowMat>;
using CMapM = Eigen::Map<const RowMat>;
using MapS = Eigen::Map<RowMat, 0, Eigen::OuterStride<>>;  // a column block of a wider matrix
using CMapS = Eigen::Map<const RowMat, 0, Eigen::OuterStride<>>;
using MapV = Eigen::Map<Eigen::VectorXf>;
using CMapV = Eigen::Map<const Eigen::VectorXf>;
using MapA = Eigen::Map<Eigen::ArrayXf>;
using CMapA = Eigen::Map<const Eigen::ArrayXf>;

inline MapM mat(float* p, int64_t r, int64_t c) { return MapM(p, r, c); }
inline CMapM mat(const float* p, int64_t r, int64_t c) { return CMapM(p, r, c); }
inline MapS block(float* p, int64_t r, int64_t c, int64_t stride) { return MapS(p, r, c, Eigen::OuterStride<>(stride)); }
inline CMapS block(const float* p, int64_t r, int64_t c, int64_t stride) {
  return CMapS(p, r, c, Eigen::OuterStride<>(stride));
}

}  // namespace oomb::executor::cpu
