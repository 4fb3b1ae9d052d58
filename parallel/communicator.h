// The communicator interface (DESIGN §2): collectives over a group of ranks, every call counted.
// Bytes are counted as sent by this rank, per collective kind and per link class (intra-node or
// inter-node, nodes being `gpus_per_node` consecutive world ranks), so metrics can report them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

namespace strata {

enum class LinkClass { intra_node, inter_node };

struct CommStats {
  // kind ("all_reduce", "broadcast", ...) -> link class -> bytes sent by this rank
  std::map<std::string, std::map<LinkClass, std::uint64_t>> bytes;
  std::map<std::string, std::uint64_t> calls;
  std::uint64_t total_bytes() const;
  void add(const std::string& kind, LinkClass link, std::uint64_t sent);
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In-place sum over the group.
  virtual void all_reduce_sum(float* data, std::size_t count) = 0;
  virtual void all_reduce_sum(double* data, std::size_t count) = 0;
  // In-place maximum (used to agree on flags such as "a signal arrived").
  virtual void all_reduce_max(std::int64_t* data, std::size_t count) = 0;
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;

  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = CommStats{}; }

 protected:
  CommStats stats_;
};

}  // namespace strata
