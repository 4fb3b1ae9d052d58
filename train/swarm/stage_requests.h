// What the peers of a swarm ask of a stage (docs/ARCHITECTURE.md §2 "SWARM"): the requests a
// micro-batch's driver sends a peer of stage k > 0, and their replies, as RpcMessages
// (parallel/swarm/swarm_transport.h). A peer keeps nothing between requests: a backward carries
// the stage's input again and the peer recomputes its forward, so the backward of a micro-batch
// may go to another peer than its forward did.
//
//   forward   header "stage=K batch=B mb=G", payload input         → payload output
//   backward  "stage=K batch=B mb=G", payload input | grad         → payload input's gradient
//   loss      (last stage) "stage=K batch=B mb=G", input | targets → "loss_sum=S", input's gradient
//             (its forward and backward in one request: the loss starts the backward)
//   evaluate  (last stage) "stage=K batch=B mb=-1", input | targets → "loss_sum=S" (no backward)
// K is the stage the sender meant: a peer that serves another (it moved) declines the request.
// A peer declines with an "error" reply whose message starts with kDeclined; the sender sends
// the request to another peer of the stage.
// input, output and gradients are boundary_floats(B) values each (B·T·C: the residual stream),
// targets B·T int32; S is Σ −log p(target) over the B·T positions, in double. G is the
// micro-batch's global id (train/swarm/stage_rounds.h counts each backward of it once per stage);
// -1 for evaluation.
//
// swarm.compression int8: every array of values (not the targets) travels as one packed int8
// shard of model/kernels/quantize_block.h in blocks of kBoundaryBlock values (the scales first,
// then a byte per value, padded to 4 bytes), and the request's header says "q=int8", which the
// reply follows. Each value then arrives within (1/254 + 2^-22) of its block's largest |value|
// (quantize_block.h's bound, scale = absmax/127), and 0 as exactly 0; the bytes are
// n + 4·⌈n/256⌉ (rounded up to 4) for n values instead of 4n.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "parallel/swarm/swarm_transport.h"
#include "plan/config.h"

namespace strata::swarm {

inline constexpr const char* kForward = "forward";
inline constexpr const char* kBackward = "backward";
inline constexpr const char* kLoss = "loss";
inline constexpr const char* kEvaluate = "evaluate";
inline constexpr const char* kDeclined = "declined: ";

// Values per int8 block (its fp32 scale costs 4 bytes: 1.6% of the block's 256).
inline constexpr std::size_t kBoundaryBlock = 256;

// Bytes of `values` values as sent.
std::size_t boundary_bytes(std::size_t values, SwarmCompression compression);

// A request's arrays, as the handler reads them (decoded).
struct StageRequest {
  std::string method;
  int stage = -1;
  int batch = 0;
  std::int64_t micro_batch = -1;
  SwarmCompression compression = SwarmCompression::none;
  std::vector<float> input;
  std::vector<float> output_grad;     // backward
  std::vector<std::int32_t> targets;  // loss, evaluate
};

// Encodes a request: `output_grad` for a backward, `targets` for loss and evaluate, else empty.
RpcMessage stage_request(const std::string& method, int stage, int batch, std::int64_t micro_batch,
                         SwarmCompression compression, std::span<const float> input,
                         std::span<const float> output_grad = {},
                         std::span<const std::int32_t> targets = {});
// Reads `message` for a stage whose boundary holds `boundary_floats` values per sequence and
// whose sequences are `seq_len` long. A request of another size or an unknown method throws
// std::runtime_error naming it.
StageRequest read_stage_request(const RpcMessage& message, std::size_t boundary_floats,
                                int seq_len);

// Replies: values (an output or a gradient), encoded as the request was, and, for loss and
// evaluate, the loss sum.
RpcMessage stage_reply(std::span<const float> values, SwarmCompression compression,
                       double loss_sum = 0);
// The values of a reply, which must hold `expected` of them (else std::runtime_error).
std::vector<float> reply_floats(const RpcMessage& reply, std::size_t expected);
double reply_loss_sum(const RpcMessage& reply);

}  // namespace strata::swarm
