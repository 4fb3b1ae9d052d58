// The Newton-Schulz orthogonalisation Muon applies to a matrix's momentum (train/optimizer/muon.h):
// X ← G / (‖G‖_F + 1e-7), then `steps` times X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ, on the
// orientation with fewer rows (the transpose of a tall matrix), and a, b, c = 3.4445, −4.7750,
// 2.0315: Keller Jordan's quintic, which drives every singular value of X into about [0.7, 1.2]
// in five steps (it trades exact convergence to 1 for speed), so the result is close to U·Vᵀ of
// G's SVD. fp32 on the CPU's GEMMs (model/kernels/cpu/blas.h); double for the tests' reference.
#pragma once

namespace strata {

// Orthogonalises the row-major [rows, cols] matrix `x` in place.
void newton_schulz(float* x, int rows, int cols, int steps);
void newton_schulz(double* x, int rows, int cols, int steps);

}  // namespace strata
