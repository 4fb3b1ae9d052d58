// Where an optimizer's per-element state lives (optimizer.offload, docs/ARCHITECTURE.md §2:
// optimizer offload), and how an update visits it: in chunks of consecutive elements. The state
// is a few planes, each one value per element of a width of its own (AdamW: m and v, 4 bytes
// each; AdamW8bit: its two codes, 1 byte each; Muon: its momentum; Adafactor: its first moment).
//   none  the planes in memory, visited as one chunk (the state in place: no copy).
//   host  an arena of its own, visited chunk by chunk (on CUDA the whole update runs on the
//         host's cores over this same path: train/backend/cuda_training.h).
//   disk  a file in optimizer.offload_dir, streamed through a bounded buffer of three chunks:
//         while the update works on chunk k, an I/O thread reads chunk k+1 and writes chunk k−1
//         back (ZeRO-Infinity's NVMe mode), so memory holds three chunks whatever the state's
//         size. The file is created unlinked (O_TMPFILE, or a unique name removed at once), so
//         it is scratch that nothing reads after the run: a killed run leaves nothing behind,
//         and a resumed one starts from its checkpoint, which copies the state out through the
//         same stream (read_all) and back in (write_all).
// A chunk's planes lie one after another, each starting at a multiple of 8 bytes (so a float
// plane after a byte plane stays aligned): chunk_buffer_bytes (plan/optimizer_state.h) is one
// chunk's size, the disk file holds chunk k at k times a whole chunk's size, and the planner
// counts the same bytes.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "plan/config.h"

namespace strata {

class ChunkedState {
 public:
  static constexpr std::size_t kMaxPlanes = 4;

  // `elements` elements, each with one value of widths[p] bytes in every plane p (zero at the
  // start), visited in chunks of `chunk` elements (none: one chunk); `dir` is the disk mode's
  // directory.
  static std::unique_ptr<ChunkedState> make(OptimizerOffload where, std::size_t elements,
                                            std::vector<std::size_t> widths, std::size_t chunk,
                                            const std::string& dir);
  virtual ~ChunkedState() = default;

  std::size_t elements() const { return elements_; }
  // The elements of every chunk but the last.
  std::size_t chunk_elements() const { return chunk_; }
  const std::vector<std::size_t>& widths() const { return widths_; }

  // The chunk a visit hands to its body: elements [first, first + count), plane p's values of
  // them at plane<T>(p).
  struct Chunk {
    std::size_t first = 0, count = 0;
    std::array<std::byte*, kMaxPlanes> planes{};
    template <class T>
    T* plane(std::size_t p) const {
      return reinterpret_cast<T*>(planes[p]);
    }
  };
  using Body = std::function<void(const Chunk&)>;
  // Calls body for every chunk in order and keeps what it wrote; `read_only`: the body only reads
  // (the disk stream writes nothing back).
  virtual void visit(const Body& body, bool read_only = false) = 0;
  // Copies every plane out (planes[p]: elements() values of widths()[p] bytes), or in.
  void read_all(const std::vector<void*>& planes);
  void write_all(const std::vector<const void*>& planes);
  // Bytes held in memory (plan/optimizer_state.h counts the same).
  virtual std::size_t resident_bytes() const = 0;

 protected:
  ChunkedState(std::size_t elements, std::vector<std::size_t> widths, std::size_t chunk);
  std::size_t elements_;
  std::vector<std::size_t> widths_;
  std::size_t chunk_;
};

}  // namespace strata
