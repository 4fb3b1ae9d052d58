#include "parallel/mesh/mesh.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <tuple>

#include "model/core/error.h"

namespace strata {

MeshShape resolve_mesh_shape(const MeshRequest& request, int world_size) {
  if (world_size < 1) fail("world size must be >= 1, got ", world_size);
  if (request.tp < 1) fail("'parallel.tp' must be >= 1, got ", request.tp);
  if (request.pp < 1) fail("'parallel.pp' must be >= 1, got ", request.pp);
  if (request.dp < 0) fail("'parallel.dp' must be 'auto' or a positive integer, got ", request.dp);
  if (request.gpus_per_node < 1)
    fail("'parallel.gpus_per_node' must be >= 1, got ", request.gpus_per_node);
  if (request.ep < 1) fail("'parallel.ep' must be >= 1, got ", request.ep);
  if (request.cp < 1) fail("'parallel.cp' must be >= 1, got ", request.cp);

  // 64-bit products: tp, cp, pp and dp are each an int, their products need not be. Messages name
  // cp only where it is in use, so that layouts without it read as they always have.
  const std::int64_t model_parallel = std::int64_t{request.tp} * request.cp * request.pp;
  const std::string axes = request.cp == 1 ? "tp*pp" : "tp*cp*pp";
  const std::string factors = std::to_string(request.tp) + "*" +
                              (request.cp == 1 ? "" : std::to_string(request.cp) + "*") +
                              std::to_string(request.pp);
  if (world_size % model_parallel != 0)
    fail("world size ", world_size, " is not divisible by parallel.",
         request.cp == 1 ? "tp*parallel.pp" : "tp*parallel.cp*parallel.pp", " (", factors, "=",
         model_parallel, ")");
  const std::int64_t dp = request.dp == 0 ? world_size / model_parallel : request.dp;
  if (dp * model_parallel != world_size)
    fail("'parallel.dp' (", dp, ") * ", axes, " (", factors, "=", model_parallel,
         ") must equal the world size ", world_size, "; use dp: auto or launch ",
         dp * model_parallel, " ranks");

  // Tensor-parallel groups are aligned blocks of tp ranks; when tp divides gpus_per_node none
  // crosses a node boundary. On a single node nothing can cross, whatever tp. Otherwise the group
  // holding the node's first rank past the last full block of tp crosses, and would put the
  // per-layer activation exchange on the slow inter-node link.
  if (world_size > request.gpus_per_node && request.gpus_per_node % request.tp != 0)
    fail("'parallel.tp' (", request.tp, ") must divide parallel.gpus_per_node (",
         request.gpus_per_node, ") when the world (", world_size,
         " ranks) spans several nodes: a tensor-parallel group communicates in every layer and "
         "must stay inside one node");
  if (dp % request.ep != 0)
    fail("'parallel.ep' (", request.ep, ") must divide the data-parallel degree (dp ", dp,
         "): the experts are split over ep ranks of the data-parallel group");
  return MeshShape{request.tp, request.pp, static_cast<int>(dp), request.ep, request.cp};
}

int Mesh::world_rank_of(const MeshShape& shape, int tp_rank, int dp_rank, int pp_rank,
                        int cp_rank) {
  STRATA_CHECK(tp_rank >= 0 && tp_rank < shape.tp && dp_rank >= 0 && dp_rank < shape.dp &&
                   pp_rank >= 0 && pp_rank < shape.pp && cp_rank >= 0 && cp_rank < shape.cp,
               "mesh coordinates out of range");
  return ((pp_rank * shape.dp + dp_rank) * shape.cp + cp_rank) * shape.tp + tp_rank;
}

MeshCoordinates Mesh::coordinates_of(const MeshShape& shape, int world_rank) {
  STRATA_CHECK(world_rank >= 0 && world_rank < shape.world_size(), "world rank out of range");
  const int tp_cp = shape.tp * shape.cp;
  return MeshCoordinates{world_rank % shape.tp, world_rank / tp_cp % shape.dp,
                         world_rank / (tp_cp * shape.dp), world_rank / shape.tp % shape.cp};
}

Mesh::Mesh(int world_size, int world_rank, int tp, int pp, int dp, int gpus_per_node)
    : Mesh(resolve_mesh_shape(MeshRequest{tp, pp, dp, gpus_per_node}, world_size), world_rank,
           gpus_per_node) {}

Mesh::Mesh(const MeshShape& shape, int world_rank, int gpus_per_node)
    : shape_(resolve_mesh_shape(
          MeshRequest{shape.tp, shape.pp, shape.dp, gpus_per_node, shape.ep, shape.cp},
          shape.world_size())),
      world_rank_(world_rank),
      gpus_per_node_(gpus_per_node) {
  if (world_rank < 0 || world_rank >= shape_.world_size())
    fail("world rank ", world_rank, " is outside the world of ", shape_.world_size(), " ranks");
  coordinates_ = coordinates_of(shape_, world_rank);
  // Each group: the ranks that share the other coordinates (and, below, the node or local index).
  const auto at = [this](int r) { return coordinates_of(shape_, r); };
  tp_group_ = members_sharing([&](int r) { return std::tuple{at(r).cp, at(r).dp, at(r).pp}; });
  dp_group_ = members_sharing([&](int r) { return std::tuple{at(r).tp, at(r).cp, at(r).pp}; });
  pp_group_ = members_sharing([&](int r) { return std::tuple{at(r).tp, at(r).cp, at(r).dp}; });
  cp_group_ = members_sharing([&](int r) { return std::tuple{at(r).tp, at(r).dp, at(r).pp}; });
  dp_cp_group_ = members_sharing([&](int r) { return std::pair{at(r).tp, at(r).pp}; });
  node_group_ = members_sharing([&](int r) { return node_of(r); });
  const int ep = shape_.ep;
  ep_group_ = members_sharing([&](int r) {
    return std::tuple{at(r).tp, at(r).cp, at(r).pp, at(r).dp / ep};
  });
  expert_dp_group_ = members_sharing([&](int r) {
    return std::tuple{at(r).tp, at(r).cp, at(r).pp, at(r).dp % ep};
  });
  dp_intra_node_group_ = members_sharing([&](int r) {
    return std::tuple{at(r).tp, at(r).cp, at(r).pp, node_of(r)};
  });
  dp_inter_node_group_ = members_sharing([&](int r) {
    return std::tuple{at(r).tp, at(r).cp, at(r).pp, dp_local_index_of(r)};
  });
}

std::pair<int, int> Mesh::dp_ranks_in_node_of(int world_rank) const {
  const MeshCoordinates c = coordinates_of(shape_, world_rank);
  // The group's world ranks are base + d·tp·cp for dp ranks d; 64-bit, as gpus_per_node is any
  // int.
  const std::int64_t base = world_rank_of(c.tp, 0, c.pp, c.cp);
  const std::int64_t stride = std::int64_t{shape_.tp} * shape_.cp;
  const auto first_at_or_after = [&](std::int64_t rank) {
    if (rank <= base) return 0;
    return static_cast<int>(std::min<std::int64_t>(shape_.dp, (rank - base + stride - 1) / stride));
  };
  const std::int64_t node_begin = std::int64_t{node_of(world_rank)} * gpus_per_node_;
  return {first_at_or_after(node_begin), first_at_or_after(node_begin + gpus_per_node_)};
}

int Mesh::dp_local_index_of(int world_rank) const {
  return coordinates_of(shape_, world_rank).dp - dp_ranks_in_node_of(world_rank).first;
}

bool Mesh::dp_factors_evenly() const {
  // Every rank's intra-node group has the size of rank 0's: then each dp group's nodes hold equal
  // shares, and so does every dp group.
  const auto intra_size = [&](int r) {
    const auto [first, end] = dp_ranks_in_node_of(r);
    return end - first;
  };
  for (int r = 1; r < world_size(); ++r)
    if (intra_size(r) != intra_size(0)) return false;
  return true;
}

std::vector<std::pair<int, int>> stage_layer_ranges(int n_layer, int pp,
                                                    const std::vector<int>& pp_layers) {
  if (pp < 1) fail("'parallel.pp' must be >= 1, got ", pp);
  if (n_layer < pp)
    fail("'parallel.pp' (", pp, ") must be <= model.n_layer (", n_layer,
         "): every pipeline stage holds at least one layer");
  std::vector<int> sizes;
  if (pp_layers.empty()) {
    for (int stage = 0; stage < pp; ++stage)
      sizes.push_back(n_layer / pp + (stage < n_layer % pp ? 1 : 0));
  } else {
    if (static_cast<int>(pp_layers.size()) != pp)
      fail("'parallel.pp_layers' must have one entry per pipeline stage (parallel.pp = ", pp,
           "), got ", pp_layers.size());
    for (std::size_t i = 0; i < pp_layers.size(); ++i)
      if (pp_layers[i] < 1)
        fail("'parallel.pp_layers' entries must be >= 1, got ", pp_layers[i], " at index ", i);
    const std::int64_t total = std::accumulate(pp_layers.begin(), pp_layers.end(), std::int64_t{0});
    if (total != n_layer)
      fail("'parallel.pp_layers' must sum to model.n_layer (", n_layer, "), got ", total);
    sizes = pp_layers;
  }
  std::vector<std::pair<int, int>> ranges;
  int begin = 0;
  for (int size : sizes) {
    ranges.emplace_back(begin, begin + size);
    begin += size;
  }
  return ranges;
}

}  // namespace strata
