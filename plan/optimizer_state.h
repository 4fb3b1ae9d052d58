// What each optimizer (optimizer.name; train/optimizer/) keeps and does per step, as the planner
// counts it (docs/ARCHITECTURE.md §2: optimizers). The optimizers' own memory accounts equal
// these counts (tests/unit/optimizer_state_test.cpp), so the planner's memory prediction stays
// byte-exact whichever optimizer a run takes.
//   adamw      m and v: 8 bytes per owned element (padding included)
//   adafactor  per tensor the range meets: rows + cols floats of a matrix, the size of a vector
//              (whole, on every holder); plus m, 4 bytes per owned element, with adafactor.beta1
//              > 0
//   adamw8bit  one byte each of m and v per owned element; per block of the layout's tensors
//              (every holder keeps all of them) the two scales and the two maxima exchanged: 24
//   muon       the momentum over the owned elements of its matrices (4 bytes each), AdamW's m
//              and v over those of the tensors Muon leaves to AdamW (8 bytes each)
// The per-element part (chunked_parts) is what optimizer.offload moves (chunked_state.h): host
// keeps the same bytes in an arena of its own; disk keeps three chunks of each part in memory,
// chunk_buffer_bytes(min(offload_chunk, elements)) each.
#pragma once

#include <cstddef>
#include <vector>

#include "model/core/element_range.h"
#include "model/parameter_layout.h"
#include "plan/compute_model.h"
#include "plan/config.h"

namespace strata {

// Whether Muon, not its AdamW, updates the tensor: a decayed (2-D) weight other than the
// embeddings, an untied head and the MoE router (the blocks' attention and MLP matrices, each
// expert's).
bool muon_updates(const TensorView& t);

// The per-element state of an optimizer over a part of its range: `elements` values in each
// plane, plane p's of widths[p] bytes (train/optimizer/chunked_state.h holds one such part).
struct ChunkedPart {
  std::size_t elements = 0;
  std::vector<std::size_t> widths;
};
// `config`'s optimizer's parts over `owned` of `layout`, in the order the optimizer makes them.
std::vector<ChunkedPart> chunked_parts(const ParameterLayout& layout, ElementRange owned,
                                       const OptimizerConfig& config);
// One plane of `count` values of `width` bytes in a chunk, rounded up to a multiple of 8 bytes
// so that the next plane starts aligned; and one chunk of planes `widths`.
std::size_t chunk_plane_bytes(std::size_t count, std::size_t width);
std::size_t chunk_buffer_bytes(std::size_t count, const std::vector<std::size_t>& widths);
// The bytes optimizer.offload disk streams per update: each part read and written back once
// (AdamW8bit reads it twice: its maxima pass, then its update).
std::size_t offload_stream_bytes(const ParameterLayout& layout, ElementRange owned,
                                 const OptimizerConfig& config);

// The bytes of state `config`'s optimizer keeps for `owned` of `layout`.
std::size_t optimizer_state_bytes(const ParameterLayout& layout, ElementRange owned,
                                  const OptimizerConfig& config);

// The 8-bit optimizer's blocks (train/optimizer/adamw8bit.h) in the layout's tensors, and in
// those tensor parallelism splits (whose maxima are agreed over tp too).
struct AdamW8bitBlocks {
  std::size_t all = 0, split = 0;
};
AdamW8bitBlocks adamw8bit_blocks(const ParameterLayout& layout, int block_size);

// The values Adafactor sums over its groups each step (train/optimizer/adafactor.h): its
// statistics (rows + cols of each matrix, the size of each vector) and 2 squares per tensor, of
// the tied wte, of the other tensors, and of those split over tp (a part of the others).
struct AdafactorSums {
  std::size_t wte_statistics = 0, wte_norms = 0;
  bool wte_split = false;
  std::size_t other_statistics = 0, other_norms = 0;
  std::size_t split_statistics = 0, split_norms = 0;
};
AdafactorSums adafactor_sums(const ParameterLayout& layout);

// One update of `owned` of `layout` (and the zeroing of `gradients` elements for the next step):
// the element traffic of the optimizer's passes over its elements, and Muon's Newton-Schulz
// GEMMs on every matrix the range meets.
Work optimizer_work(const Config& config, const ParameterLayout& layout, ElementRange owned,
                    std::size_t gradients);

}  // namespace strata
