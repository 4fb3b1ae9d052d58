#include "plan/compute_model.h"

#include "model/activation_sizes.h"
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
  // The block's widths (model/gpt_shape.h): the q, k, v product's Q (3C multi-head), the MLP's F
  // and its first product's Fc (F, or SwiGLU's 2F); rope: the turned q and k channels (0: none).
  double Q = 0, F = 0, Fc = 0, rope = 0;
  // A mixture of experts: experts E, held per rank E/ep, and the rows R its experts compute per
  // MoE block under balanced routing (model/activation_sizes.h moe_balanced_assignments).
  double E = 0, held = 0, R = 0;
  bool exchanges = false;  // expert parallelism: the rows are reordered around the all-to-alls
};

Dims dims_of(const Config& config, int tp, bool sequence_parallel) {
  const ModelConfig& m = config.model;
  // Each rank's rows: under context parallelism seq_len / cp of each sequence (attention's keys
  // stay the whole sequence's, d.T).
  const double N = static_cast<double>(config.train.micro_batch) * m.seq_len / config.parallel.cp;
  const GptShape shape = gpt_shape_of(m);
  Dims d{N,
         sequence_parallel && tp > 1 ? N / tp : N,
         static_cast<double>(m.d_model),
         static_cast<double>(m.seq_len),
         static_cast<double>(tp),
         static_cast<double>(shape.padded_vocab())};
  d.Q = shape.qkv_width();
  d.F = shape.ffn_width();
  d.Fc = shape.fc_width();
  if (shape.arch.position == Position::rope)
    d.rope = static_cast<double>(m.n_head + shape.kv_head_count()) * shape.head_size();
  if (m.moe.enabled()) {
    d.E = m.moe.experts;
    d.held = d.E / config.parallel.ep;
    d.R = static_cast<double>(
        moe_balanced_assignments(m.moe, config.train.micro_batch * m.seq_len, m.seq_len));
    d.exchanges = config.parallel.ep > 1;
  }
  return d;
}

// One layer's attention half: norm 1, qkv (2·N·C·Q/t), RoPE on q and k (an elementwise pass
// where the model has it), attention, its projection (2·N·C²/t), the residual and norm 2. GPT-2's
// Q = 3C makes it 8·N·C²/t of a dense layer's 24.
Work attention_half(const Dims& d, double element_bytes) {
  return Work{2 * d.N * d.C * (d.Q + d.C) / d.t, 4 * d.N * d.T * d.C / d.t,
              2 * element_bytes * (4 * d.N_local * d.C + d.N * d.rope / d.t),
              d.rope > 0 ? 7.0 : 6.0, element_bytes * d.C * (d.Q + d.C) / d.t};
}

// One layer's forward: the attention half and the MLP (2·N·C·Fc/t and 2·N·F·C/t; its activation
// reads Fc and writes F per row), and the part selective recomputation reruns.
Work layer_forward(const Dims& d, double element_bytes) {
  Work w = attention_half(d, element_bytes);
  w += Work{2 * d.N * d.C * (d.Fc + d.F) / d.t, 0, element_bytes * d.N * (d.Fc + d.F) / d.t,
            d.Fc > d.F ? 5.0 : 4.0, element_bytes * d.C * (d.Fc + d.F) / d.t};
  return w;
}
Work attention_core(const Dims& d, double element_bytes) {
  return Work{2 * d.N * d.C * d.Q / d.t, 4 * d.N * d.T * d.C / d.t,
              2 * element_bytes * d.N * d.rope / d.t, d.rope > 0 ? 3.0 : 2.0,
              element_bytes * d.Q * d.C / d.t};
}

// An MoE block's forward (model/moe/moe_layer.h): the attention half, then the router on all N
// rows (2·N·C·E, every tensor-parallel rank; its fp32 weights) and the held experts' MLPs, the
// dense one's on the R rows routed to them (2·R·C·(Fc + F)/t: 16·R·C²/t for GPT-2's, R = N·top_k
// dropless, fewer under capacity); elementwise the softmax, the activation (reading Fc and
// writing F per row, /t), the copies of the A = R assignment rows out and back (and under expert
// parallelism their expert-major reorder on both sides of the all-to-alls); each held expert's
// two GEMMs and activation are calls of their own.
Work moe_layer_forward(const Dims& d, double element_bytes) {
  const double mlp = (d.Fc + d.F) / d.t;  // an expert's rows of fc and proj, per channel
  Work w = attention_half(d, element_bytes);
  w += Work{2 * d.N * d.C * d.E + 2 * d.R * d.C * mlp, 0,
            element_bytes * (2 * d.N * d.E + d.R * mlp +
                             2 * (2 * d.R * d.C + (d.exchanges ? 2 * d.R * d.C : 0))),
            4 + 3 * d.held, 4 * d.E * d.C + element_bytes * d.held * d.C * mlp};
  return w;
}

// One layer's weight half: dW += dYᵀ·X for its four GEMMs (their forward's FLOPs), the biases
// and norm gains from the stashed gradients (8 calls). An MoE block's: the attention half's
// two, each held expert's two on its rows, the router's on this rank's own rows.
Work layer_weight_gradients(const Dims& d) {
  return Work{2 * d.N * d.C * (d.Q + d.C + d.Fc + d.F) / d.t, 0, 0, 8, 0};
}
Work moe_weight_gradients(const Dims& d) {
  return Work{2 * d.N * d.C * (d.Q + d.C) / d.t + 2 * d.R * d.C * (d.Fc + d.F) / d.t +
                  2 * d.N_local * d.C * d.E,
              0, 0, 5 + 2 * d.held, 0};
}

// `dense` dense blocks and `moe` MoE blocks.
PassWork layers_of(const Config& config, const Dims& d, int dense, int moe, double element_bytes) {
  Work forward = layer_forward(d, element_bytes) * dense;
  if (moe > 0) forward += moe_layer_forward(d, element_bytes) * moe;
  Work backward = forward * 2;
  const Recompute recompute = config.recompute;
  if (recompute == Recompute::full) backward += forward;
  if (recompute == Recompute::selective)
    backward += attention_core(d, element_bytes) * (dense + moe);
  Work weight = layer_weight_gradients(d) * dense;
  if (moe > 0) weight += moe_weight_gradients(d) * moe;
  return PassWork{forward, backward, weight};
}

}  // namespace

PassWork micro_batch_work(const Config& config, const ModelPartition& partition,
                          std::size_t element_bytes) {
  const Dims d = dims_of(config, partition.tp_size, config.parallel.sequence_parallel);
  const double e = static_cast<double>(element_bytes);
  const int moe = moe_block_count(gpt_shape_of(config.model), partition);
  PassWork work = layers_of(config, d, partition.layers() - moe, moe, e);
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

PassWork layer_work(const Config& config, int tp, int begin, int end, std::size_t element_bytes) {
  int moe = 0;
  for (int l = begin; l < end; ++l) moe += config.model.moe.is_moe_block(l);
  return layers_of(config, dims_of(config, tp, config.parallel.sequence_parallel),
                   end - begin - moe, moe, static_cast<double>(element_bytes));
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
