// Where AdamW's per-element state lives (optimizer.offload, docs/ARCHITECTURE.md §2: optimizer
// offload), and how an update visits it: in chunks of consecutive elements, each chunk holding
// its elements' m then their v.
//   none  one arena in memory, visited as one chunk (the state in place: no copy).
//   host  an arena of its own, visited chunk by chunk (on CUDA it would be pinned host memory
//         with the update on the host's cores; the CPU backend runs this same path).
//   disk  a file in optimizer.offload_dir, streamed through a bounded buffer of three chunks:
//         while the update works on chunk k, an I/O thread reads chunk k+1 and writes chunk k−1
//         back (ZeRO-Infinity's NVMe mode), so memory holds 3 · chunk · 8 bytes whatever the
//         state's size. The file is created unlinked (O_TMPFILE, or a unique name removed at once),
//         so it is scratch that nothing reads after the run: a killed run leaves nothing behind,
//         and a resumed one starts from its checkpoint, which copies the state out through the
//         same stream (save) and back in (load).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plan/config.h"

namespace strata {

class ChunkedState {
 public:
  // `elements` elements of two floats each (m, v), zero, visited in chunks of `chunk` elements
  // (none: one chunk); `dir` is the disk mode's directory.
  static std::unique_ptr<ChunkedState> make(OptimizerOffload where, std::size_t elements,
                                            std::size_t chunk, const std::string& dir);
  virtual ~ChunkedState() = default;

  std::size_t elements() const { return elements_; }
  // Calls body(first, count, m, v) for every chunk in order (m and v hold the chunk's `count`
  // values) and keeps what body wrote.
  using Body = std::function<void(std::size_t first, std::size_t count, float* m, float* v)>;
  virtual void visit(const Body& body) = 0;
  // Copies all of m and v out (elements() each), or in.
  virtual void read_all(float* m, float* v) = 0;
  virtual void write_all(const float* m, const float* v) = 0;
  // Bytes held in memory (plan/optimizer_state.h counts the same).
  virtual std::size_t resident_bytes() const = 0;

 protected:
  explicit ChunkedState(std::size_t elements) : elements_(elements) {}
  std::size_t elements_;
};

}  // namespace strata
