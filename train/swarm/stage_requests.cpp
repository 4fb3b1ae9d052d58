#include "train/swarm/stage_requests.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "model/kernels/cpu/quantize.h"

namespace strata::swarm {

namespace {

bool int8(SwarmCompression c) { return c == SwarmCompression::int8; }

QuantizedShardLayout int8_layout(std::size_t values) {
  return quantized_shard_layout(values, kBoundaryBlock, QuantFormat::int8);
}

void append_targets(std::vector<char>& bytes, std::span<const std::int32_t> values) {
  const std::size_t at = bytes.size();
  bytes.resize(at + values.size_bytes());
  if (!values.empty()) std::memcpy(bytes.data() + at, values.data(), values.size_bytes());
}

void append_values(std::vector<char>& bytes, std::span<const float> values,
                   SwarmCompression compression) {
  const std::size_t at = bytes.size();
  bytes.resize(at + boundary_bytes(values.size(), compression));
  if (values.empty()) return;
  if (int8(compression))
    cpu::quantize_shards(values.data(), int8_layout(values.size()), 1,
                         reinterpret_cast<std::uint8_t*>(bytes.data() + at));
  else
    std::memcpy(bytes.data() + at, values.data(), values.size_bytes());
}

// `count` values encoded at `offset` of `message`'s payload.
std::vector<float> read_values(const RpcMessage& message, std::size_t offset, std::size_t count,
                               SwarmCompression compression) {
  std::vector<float> values(count);
  if (count == 0) return values;
  const char* at = message.payload.data() + offset;
  if (int8(compression))
    cpu::dequantize_shards(reinterpret_cast<const std::uint8_t*>(at), int8_layout(count), 1,
                           values.data());
  else
    std::memcpy(values.data(), at, count * sizeof(float));
  return values;
}

// The value of `name=` in a header of space-separated name=value items; nullopt when absent.
std::optional<std::string> find_header_value(const std::string& header, const std::string& name) {
  const std::string key = name + "=";
  std::size_t at = 0;
  while (at < header.size()) {
    const std::size_t end = std::min(header.find(' ', at), header.size());
    if (header.compare(at, key.size(), key) == 0)
      return header.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  return std::nullopt;
}

std::string header_value(const std::string& header, const std::string& name) {
  if (std::optional<std::string> value = find_header_value(header, name)) return *value;
  throw std::runtime_error("swarm message header '" + header + "' has no " + name);
}

SwarmCompression header_compression(const std::string& header) {
  const std::optional<std::string> q = find_header_value(header, "q");
  if (!q) return SwarmCompression::none;
  if (*q == "int8") return SwarmCompression::int8;
  throw std::runtime_error("swarm message of unknown compression '" + *q + "'");
}

std::string compression_item(SwarmCompression compression) {
  return int8(compression) ? " q=int8" : "";
}

}  // namespace

std::size_t boundary_bytes(std::size_t values, SwarmCompression compression) {
  return int8(compression) ? int8_layout(values).bytes : values * sizeof(float);
}

RpcMessage stage_request(const std::string& method, int stage, int batch, std::int64_t micro_batch,
                         SwarmCompression compression, std::span<const float> input,
                         std::span<const float> output_grad,
                         std::span<const std::int32_t> targets) {
  RpcMessage m;
  m.method = method;
  m.header = "stage=" + std::to_string(stage) + " batch=" + std::to_string(batch) +
             " mb=" + std::to_string(micro_batch) + compression_item(compression);
  append_values(m.payload, input, compression);
  if (!output_grad.empty()) append_values(m.payload, output_grad, compression);
  append_targets(m.payload, targets);
  return m;
}

StageRequest read_stage_request(const RpcMessage& message, std::size_t boundary_floats,
                                int seq_len) {
  StageRequest r;
  r.method = message.method;
  r.stage = std::stoi(header_value(message.header, "stage"));
  r.batch = std::stoi(header_value(message.header, "batch"));
  if (r.batch < 1) throw std::runtime_error("swarm request of batch " + std::to_string(r.batch));
  r.micro_batch = std::stoll(header_value(message.header, "mb"));
  r.compression = header_compression(message.header);
  const std::size_t B = static_cast<std::size_t>(r.batch);
  const std::size_t activations = B * boundary_floats, positions = B * seq_len;
  const std::size_t array = boundary_bytes(activations, r.compression);
  std::size_t expected = array;
  if (r.method == kBackward)
    expected += array;
  else if (r.method == kLoss || r.method == kEvaluate)
    expected += positions * sizeof(std::int32_t);
  else if (r.method != kForward)
    throw std::runtime_error("unknown swarm request '" + r.method + "'");
  if (message.payload.size() != expected)
    throw std::runtime_error(
        "swarm request '" + r.method + "' of batch " + std::to_string(r.batch) + " carries " +
        std::to_string(message.payload.size()) + " bytes, expected " + std::to_string(expected));
  r.input = read_values(message, 0, activations, r.compression);
  if (r.method == kBackward)
    r.output_grad = read_values(message, array, activations, r.compression);
  if (r.method == kLoss || r.method == kEvaluate) {
    r.targets.resize(positions);
    std::memcpy(r.targets.data(), message.payload.data() + array, positions * sizeof(std::int32_t));
  }
  return r;
}

RpcMessage stage_reply(std::span<const float> values, SwarmCompression compression,
                       double loss_sum) {
  RpcMessage m;
  m.method = "ok";
  char text[64];
  std::snprintf(text, sizeof text, "loss_sum=%.17g", loss_sum);
  m.header = text + compression_item(compression);
  append_values(m.payload, values, compression);
  return m;
}

std::vector<float> reply_floats(const RpcMessage& reply, std::size_t expected) {
  const SwarmCompression compression = header_compression(reply.header);
  if (reply.payload.size() != boundary_bytes(expected, compression))
    throw std::runtime_error("swarm reply carries " + std::to_string(reply.payload.size()) +
                             " bytes, expected " +
                             std::to_string(boundary_bytes(expected, compression)));
  return read_values(reply, 0, expected, compression);
}

double reply_loss_sum(const RpcMessage& reply) {
  return std::stod(header_value(reply.header, "loss_sum"));
}

}  // namespace strata::swarm
