#include "plan/step_time.h"

#include <algorithm>

#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "parallel/mesh/reduction_plan.h"
#include "parallel/pipeline/pipeline_schedule.h"
#include "plan/compute_model.h"
#include "plan/memory_account.h"
#include "plan/optimizer_state.h"
#include "plan/placement.h"
#include "plan/rank_model.h"
#include "plan/timed_pipeline.h"

namespace strata {

namespace {

const LinkSpec& link_of(const ClusterSpec& cluster, LinkClass link) {
  if (link == LinkClass::intra_node) return cluster.intra_node;
  if (link == LinkClass::inter_worker && cluster.inter_worker) return *cluster.inter_worker;
  return cluster.inter_node;
}

// The pace of a ring collective or a transfer: its slowest link's bandwidth. On a cuda cluster
// NCCL splits a ring that crosses nodes into channels, one per NIC, so its node-crossing hop runs
// on as many devices' inter-node links as the group has members on a node (NCCL's multi-rail
// rings: a data-parallel ring with 8 members per node moves 8 links' worth), up to the pace of
// its hops inside the node. MPI's rings on a cpu cluster cross each node on one link.
double ring_bandwidth_gbs(const CommEvent& e, const ClusterSpec& cluster) {
  const double slowest = link_of(cluster, e.slowest).bandwidth_gbs;
  if (cluster.backend != ClusterBackend::cuda || e.slowest != LinkClass::inter_node ||
      e.node_members <= 1)
    return slowest;
  return std::min(cluster.intra_node.bandwidth_gbs, slowest * e.node_members);
}

}  // namespace

double event_seconds(const CommEvent& e, const ClusterSpec& cluster) {
  double latency = e.messages * link_of(cluster, e.slowest).latency_us * 1e-6;
  // A pipeline message on a shared machine waits for its peer to get a core back.
  if (e.phase == CommPhase::pipeline) latency = std::max(latency, cluster.busy_latency_us * 1e-6);
  if (e.kind == "all_to_all") {
    double seconds = latency;
    for (const auto& [link, bytes] : e.bytes)
      seconds += static_cast<double>(bytes) / (link_of(cluster, link).bandwidth_gbs * 1e9);
    return seconds;
  }
  return latency + static_cast<double>(e.total_bytes()) / (ring_bandwidth_gbs(e, cluster) * 1e9);
}

StepTime predict_step_time(const Config& config, const ClusterSpec& cluster, int world_size) {
  const MeshShape mesh = resolve_mesh(config, world_size);
  const ModelConfig& m = config.model;
  const GptShape shape = gpt_shape_of(m);  // MFU counts an MoE block's router and top_k experts
  const int micro_batches = config.train.global_batch / (config.train.micro_batch * mesh.dp);
  const cpu::ComputeDtype compute = config.precision.compute;
  const std::size_t element_bytes = activation_element_bytes(cluster, compute);

  StepTime step;
  // A cpu cluster is one host whose cores all its ranks share (simulated nodes included).
  CoreSharing sharing;
  if (cluster.cores_per_node > 0) {
    sharing.cores = cluster.cores_per_node * cluster.nodes;
    sharing.threads = step.threads = std::max(1, sharing.cores / world_size);
    sharing.ranks_per_stage = mesh.tp * mesh.cp * mesh.dp;
    sharing.ranks = world_size;
    sharing.waiting_share = cluster.waiting_share;
  }
  const bool overlap = cluster.backend == ClusterBackend::cuda;

  const PipelineSchedule kind = config.parallel.pipeline_schedule;
  const int chunks = config.parallel.virtual_stages;
  // Per stage, per chunk: its passes and its message to the next virtual stage.
  std::vector<std::vector<StageDurations>> durations;
  for (int stage = 0; stage < mesh.pp; ++stage) {
    const RankModel rank = rank_model(config, world_size, stage, 0, 0);
    // Each chunk is a model of its own layers (with virtual stages; else the stage's one).
    std::vector<PassWork> works;
    for (int c = 0; c < chunks; ++c)
      works.push_back(micro_batch_work(config, rank.partition.chunk(c), element_bytes));
    StageTime t;
    std::vector<double> forward_compute, backward_compute, weight_compute;
    for (const PassWork& work : works) {
      forward_compute.push_back(seconds_of(work.forward, cluster, compute, step.threads));
      backward_compute.push_back(seconds_of(work.backward, cluster, compute, step.threads));
      weight_compute.push_back(seconds_of(work.weight, cluster, compute, step.threads));
      t.forward_compute += forward_compute.back();
      t.backward_compute += backward_compute.back();
    }
    const CommPrediction comm =
        predict_communication(config, world_size, stage, 0, 0, element_bytes);
    std::vector<double> messages(static_cast<std::size_t>(chunks), 0.0);
    double forward_comm = 0, backward_comm = 0, gathers = 0;
    for (const CommEvent& e : comm.events) {
      const double seconds = event_seconds(e, cluster) * e.repeats;
      for (const auto& [link, bytes] : e.bytes)
        if (e.total_bytes() > 0)
          t.comm_seconds[link] += seconds * static_cast<double>(bytes) / e.total_bytes();
      switch (e.phase) {
        case CommPhase::forward:
          forward_comm += seconds;
          break;
        case CommPhase::backward:
          backward_comm += seconds;
          break;
        case CommPhase::pipeline:
          if (e.what == std::string("activations")) {
            messages[static_cast<std::size_t>(e.chunk)] = event_seconds(e, cluster);
            t.message = std::max(t.message, messages[static_cast<std::size_t>(e.chunk)]);
          }
          break;
        case CommPhase::gather:
          gathers += seconds;
          break;
        case CommPhase::step:
          t.step_comm += seconds;
          break;
        case CommPhase::update:
          t.update_comm += seconds;
          break;
      }
    }
    const double passes_compute = micro_batches * (t.forward_compute + t.backward_compute);
    t.gather_exposed = overlap ? std::max(0.0, gathers - passes_compute) : gathers;
    t.pass_comm = forward_comm + backward_comm;
    const double forward_share =
        t.forward_compute / std::max(1e-30, t.forward_compute + t.backward_compute);
    // The rank's blocking communication per micro-batch, spread over its chunks' passes as their
    // compute is (tensor-parallel sums and ZeRO 3 gathers go with the layers).
    const double forward_extra = (forward_comm + forward_share * t.gather_exposed) / micro_batches;
    const double backward_extra =
        (backward_comm + (1 - forward_share) * t.gather_exposed) / micro_batches;
    t.forward = t.forward_compute + forward_extra;
    t.backward = t.backward_compute + backward_extra;

    const Work update =
        optimizer_work(config, rank.layout, rank.plan.owned, rank.plan.gradient_range.size());
    t.optimizer = seconds_of(update, cluster, compute, step.threads);
    if (config.optimizer.offload != OptimizerOffload::none &&
        cluster.backend == ClusterBackend::cuda) {
      // The update on the host (train/backend/cuda_training.cpp update_on_host): the owned
      // master weights and gradients cross down and the weights back up, 12 bytes per element
      // over the host link, and the update's bytes stream at the host's memory rate.
      const double link = cluster.host_link_gbs > 0 ? cluster.host_link_gbs : kHostLinkGbs;
      const double host = cluster.host_update_gbs > 0 ? cluster.host_update_gbs : kHostUpdateGbs;
      t.optimizer = 12.0 * static_cast<double>(rank.plan.owned.size()) / (link * 1e9) +
                    update.elementwise_bytes / (host * 1e9);
    }
    if (config.optimizer.offload == OptimizerOffload::disk) {
      // The state streamed in and out while the update runs: the slower of the two.
      const double gbs = cluster.offload_gbs > 0 ? cluster.offload_gbs : kOffloadGbs;
      const double streamed =
          static_cast<double>(offload_stream_bytes(rank.layout, rank.plan.owned, config.optimizer));
      t.optimizer = std::max(t.optimizer, streamed / (gbs * 1e9));
    }
    if (stage == 0) step.rank0_comm = comm;
    const auto share = [&](double part, double whole) {
      return whole > 0 ? part / whole : 1.0 / chunks;
    };
    std::vector<StageDurations> stage_durations;
    for (std::size_t c = 0; c < works.size(); ++c)
      stage_durations.push_back(StageDurations{
          forward_compute[c] + forward_extra * share(forward_compute[c], t.forward_compute),
          backward_compute[c] + backward_extra * share(backward_compute[c], t.backward_compute),
          messages[c], weight_compute[c]});
    durations.push_back(std::move(stage_durations));
    step.stages.push_back(std::move(t));
  }

  const PipelineProgram program = make_pipeline_schedule(kind, mesh.pp, micro_batches, chunks);
  const PipelineSimulation simulation = pipeline_schedule_simulation(kind, chunks);
  const TimedPipeline clock = run_pipeline_clock(program, simulation.layout, durations, sharing,
                                                 simulation.nonblocking_sends);
  step.pipeline = clock.makespan;
  step.bubble_fraction = clock.bubble_fraction;
  step.stage_pipeline = clock.finish;
  for (int stage = 0; stage < mesh.pp; ++stage)
    step.stage_idle.push_back(clock.finish[static_cast<std::size_t>(stage)] -
                              clock.busy[static_cast<std::size_t>(stage)]);
  // After the passes every rank works at once (shared cores: all of them share).
  const double speed = shared_speed(sharing, world_size);
  double reduced = 0, updated = 0;
  for (int stage = 0; stage < mesh.pp; ++stage) {
    const StageTime& t = step.stages[static_cast<std::size_t>(stage)];
    reduced =
        std::max(reduced, clock.finish[static_cast<std::size_t>(stage)] + t.step_comm / speed);
    updated = std::max(updated, (t.optimizer + t.update_comm) / speed);
  }
  step.seconds = reduced + updated;
  const double tokens = static_cast<double>(config.train.global_batch) * m.seq_len;
  step.tokens_per_s = tokens / step.seconds;
  step.mfu = shape.flops_per_token() * tokens /
             (step.seconds * world_size * cluster.device.peak_tflops.of(compute) * 1e12);
  return step;
}

}  // namespace strata
