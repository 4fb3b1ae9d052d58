// Runs one stage's pipeline program (parallel/pipeline/pipeline_schedule.h) for one training step:
// the micro-batches of the step go forward and backward through this rank's part of the model
// (one PipelineStage per chunk, parallel/pipeline/pipeline_stage.h: any backend), and activations
// and their gradients travel to the neighbouring virtual stages over the pipeline group as host
// fp32 arrays. Programs of one chunk per rank run with the fused backward or with B and W apart
// (a micro-batch's slot stays taken from its forward to its W); programs of several chunks
// (interleaved, zbv) keep every buffer per (chunk, micro-batch), and where two neighbouring
// virtual stages live on this rank (the V's turn) hand the buffer over in place. Without
// pipeline parallelism the program is forward/backward per micro-batch, so this is also the
// single-stage training loop.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <utility>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "parallel/pipeline/pipeline_stage.h"

namespace strata {

// Fills tokens and targets (B, T) of micro-batch `mb` of the current step (every stage may ask:
// the first needs the tokens, the last the targets).
using MicroBatchSource = std::function<void(int mb, std::int32_t* tokens, std::int32_t* targets)>;

class PipelineExecutor {
 public:
  // `chunks[c]` is this rank's chunk c of the model (one for gpipe, 1f1b, zb-h1 and zb-h2),
  // placed as `layout` says; `pp` the pipeline group (rank = stage; size 1 without pipelining).
  // B, T: micro-batch shape (T the stage's sequence length). Not owned; must outlive the
  // executor. `nonblocking_sends`: transfers as pipeline_schedule.h's queued model (sends return
  // at once, each message tagged with its micro-batch, receiving chunk and direction, and
  // completed at the end of the step), which the schedules written with single transfers need
  // (pipeline_schedule_needs_nonblocking_sends); otherwise sends wait for their receive (one
  // chunk per rank only).
  PipelineExecutor(std::vector<PipelineStage*> chunks, const PipelineLayout& layout,
                   Communicator& pp, const PipelineProgram& program, int B, int T,
                   bool nonblocking_sends = false);
  // One chunk per rank.
  PipelineExecutor(PipelineStage& stage, Communicator& pp, const PipelineProgram& program, int B,
                   int T, bool nonblocking_sends = false)
      : PipelineExecutor({&stage}, PipelineLayout{}, pp, program, B, T, nonblocking_sends) {}

  // One step's forwards and backwards with the stage's weights and gradient buffer (bound by the
  // caller); its grads += gradients of loss_scale · Σ micro-batch losses. Returns the sum of the
  // micro-batch losses on the rank holding the last virtual stage, 0 elsewhere.
  double train_step(float loss_scale, const MicroBatchSource& source);

  // Wall time of the train_step calls after the first (which warms up allocations and caches):
  // in all, and inside the pipeline's transfers, waiting for a neighbour included, which is this
  // stage's idle time within its program (its bubble and its messages).
  struct Timing {
    int steps = 0;
    double seconds = 0, transfer_seconds = 0;
  };
  const Timing& timing() const { return timing_; }

  // Forward only, for evaluation: micro-batch mb of batch_sizes[mb] (<= B) sequences passes
  // through the virtual stages in order; on the rank of the last one on_losses(mb, per-position
  // losses, count) is called for each.
  void forward_only(const std::vector<int>& batch_sizes, const MicroBatchSource& source,
                    const std::function<void(int mb, const float* losses, int count)>& on_losses);

 private:
  // A buffer's owner: (chunk, micro-batch).
  using Key = std::pair<int, int>;
  using Buffers = std::map<Key, std::vector<float>>;
  // Chunk c's neighbouring virtual stages: where they live (rank -1: there is none).
  struct Neighbour {
    int rank = -1, chunk = 0;
    bool exists() const { return rank >= 0; }
  };
  struct Chunk {
    PipelineStage* stage = nullptr;
    Neighbour previous, next;
    std::vector<int> free_slots;
    bool first() const { return !previous.exists(); }
    bool last() const { return !next.exists(); }
  };

  int rank() const { return pp_.rank(); }
  Chunk& chunk(int c) { return chunks_.at(static_cast<std::size_t>(c)); }
  bool is_local(const Neighbour& n) const { return n.rank == pp_.rank(); }
  void run_forward(Key key, const MicroBatchSource& source, int batch, double* loss_sum);
  // The fused backward, or with `input_only` its B (the slot stays taken until W).
  void run_backward(Key key, float loss_scale, bool input_only);
  void run_weight_backward(Key key);
  std::vector<float>& buffer(Buffers& buffers, Key key, int batch);
  // Sends buffers[key] to `to` and drops it from `buffers` (queued: kept in flight until the step
  // ends); receives into buffer(buffers, key) from `from`. `gradient`: which channel.
  void send(Buffers& buffers, Key key, const Neighbour& to, bool gradient);
  void receive(Buffers& buffers, Key key, const Neighbour& from, bool gradient);
  // The tag of a queued message for chunk `chunk` of its receiver.
  int message_tag(int receiving_chunk, int mb, bool gradient) const;
  void run_transfer(const PipelineOp& op);

  std::vector<Chunk> chunks_;
  Communicator& pp_;
  const std::vector<PipelineOp>& ops_;
  int B_, T_;
  std::vector<std::int32_t> tokens_, targets_;
  std::map<Key, int> slot_of_;    // -> the chunk's activation slot
  std::set<Key> weight_pending_;  // through B, not yet through W
  Buffers x_, y_, dy_, dx_;       // per (chunk, micro-batch) (schedule header)
  std::vector<float> losses_;     // last stage, forward_only: per position
  bool nonblocking_sends_;
  Timing timing_;
  int steps_run_ = 0;
  struct InFlight {  // a queued send and the buffer it reads until it completes
    std::vector<float> data;
    std::unique_ptr<PendingCollective> send;
  };
  std::vector<InFlight> in_flight_;
};

}  // namespace strata
