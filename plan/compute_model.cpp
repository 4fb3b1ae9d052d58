#include "plan/compute_model.h"

#include "model/gpt.h"

namespace strata {

Work& Work::operator+=(const Work& other) {
  gemm_flops += other.gemm_flops;
  attention_flops += other.attention_flops;
  elementwise_bytes += other.elementwise_bytes;
  kernels += other.kernels;
  weight_bytes += other.weight_bytes;
  return *this;
}

Work Work::operator*(double factor) const {
  return Work{gemm_flops * factor, attention_flops * factor, elementwise_bytes * factor,
              kernels * factor, weight_bytes * factor};
}

namespace {

struct Dims {
  double N, N_local, C, T, t, V;  // rows, residual rows, width, sequence, tp, padded vocabulary
};

Dims dims_of(const Config& config, int tp, bool sequence_parallel) {
  const ModelConfig& m = config.model;
  const double N = static_cast<double>(config.train.micro_batch) * m.seq_len;
  const GptShape shape{m.n_layer, m.n_head, m.d_model, m.seq_len, m.vocab_size};
  return Dims{N,
              sequence_parallel && tp > 1 ? N / tp : N,
              static_cast<double>(m.d_model),
              static_cast<double>(m.seq_len),
              static_cast<double>(tp),
              static_cast<double>(shape.padded_vocab())};
}

// One layer's forward, and the part selective recomputation reruns.
Work layer_forward(const Dims& d, double element_bytes) {
  return Work{24 * d.N * d.C * d.C / d.t, 4 * d.N * d.T * d.C / d.t,
              2 * element_bytes * (4 * d.N_local * d.C + d.N * 4 * d.C / d.t), 10,
              element_bytes * 12 * d.C * d.C / d.t};
}
Work attention_core(const Dims& d, double element_bytes) {
  return Work{2 * d.N * d.C * 3 * d.C / d.t, 4 * d.N * d.T * d.C / d.t, 0, 2,
              element_bytes * 3 * d.C * d.C / d.t};
}

// One layer's weight half: dW += dYᵀ·X for its four GEMMs (their forward's FLOPs), the biases
// and LayerNorm gains from the stashed gradients (8 calls).
Work layer_weight_gradients(const Dims& d) { return Work{24 * d.N * d.C * d.C / d.t, 0, 0, 8, 0}; }

PassWork layers_of(const Config& config, const Dims& d, int layers, double element_bytes) {
  const Work forward = layer_forward(d, element_bytes);
  Work backward = forward * 2;
  const Recompute recompute = config.recompute;
  if (recompute == Recompute::full) backward += forward;
  if (recompute == Recompute::selective) backward += attention_core(d, element_bytes);
  return PassWork{forward * layers, backward * layers, layer_weight_gradients(d) * layers};
}

}  // namespace

PassWork micro_batch_work(const Config& config, const ModelPartition& partition,
                          std::size_t element_bytes) {
  const Dims d = dims_of(config, partition.tp_size, config.parallel.sequence_parallel);
  const double e = static_cast<double>(element_bytes);
  PassWork work = layers_of(config, d, partition.layers(), e);
  if (partition.has_embedding) {
    const Work embedding{0, 0, 2 * e * d.N * d.C, 2};
    work.forward += embedding;
    work.backward += embedding;
    work.weight += embedding;  // the scatter into wte and wpe is all weight gradient
  }
  if (partition.has_head) {
    const Work head{2 * d.N * d.C * d.V / d.t, 0, 2 * e * (3 * d.N * d.V / d.t + d.N_local * d.C),
                    5, e * d.C * d.V / d.t};
    work.forward += head;
    work.backward += head * 2;
    work.weight += Work{2 * d.N * d.C * d.V / d.t, 0, 0, 2, 0};  // wte += dlogitsᵀ·lnf, lnf
  }
  return work;
}

PassWork layer_work(const Config& config, int tp, int layers, std::size_t element_bytes) {
  return layers_of(config, dims_of(config, tp, config.parallel.sequence_parallel), layers,
                   static_cast<double>(element_bytes));
}

Work optimizer_work(const Config& config, std::size_t owned, std::size_t gradients) {
  // AdamW reads weight, gradient, m and v and writes weight, m and v (28 bytes), the norm reads
  // the gradient again, a reduced-precision run writes its compute copy; the next step's
  // accumulation starts from zeroed gradients.
  const double per_owned = 28 + 4 + (config.precision.compute == cpu::ComputeDtype::fp32 ? 0 : 4);
  return Work{0, 0, per_owned * static_cast<double>(owned) + 4.0 * static_cast<double>(gradients),
              4};
}

double seconds_of(const Work& work, const ClusterSpec& cluster, cpu::ComputeDtype compute,
                  int threads) {
  const DeviceSpec& d = cluster.device;
  const double scale = threads;
  return work.gemm_flops / (d.matmul_tflops.of(compute) * 1e12 * scale) +
         work.attention_flops / (d.attention_tflops.of(compute) * 1e12 * scale) +
         work.elementwise_bytes / (d.elementwise_gbs * 1e9 * scale) +
         work.weight_bytes / (d.weight_rate_gbs() * 1e9 * scale) +
         work.kernels * d.op_overhead_us * 1e-6;
}

std::size_t activation_element_bytes(const ClusterSpec& cluster, cpu::ComputeDtype compute) {
  return cluster.backend == ClusterBackend::cuda && compute != cpu::ComputeDtype::fp32 ? 2 : 4;
}

}  // namespace strata
