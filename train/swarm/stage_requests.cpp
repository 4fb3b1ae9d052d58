#include "train/swarm/stage_requests.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace strata::swarm {

namespace {

template <class T>
void append(std::vector<char>& bytes, std::span<const T> values) {
  const std::size_t at = bytes.size();
  bytes.resize(at + values.size_bytes());
  if (!values.empty()) std::memcpy(bytes.data() + at, values.data(), values.size_bytes());
}

// The value of `name=` in a header of space-separated name=value items.
std::string header_value(const std::string& header, const std::string& name) {
  const std::string key = name + "=";
  std::size_t at = 0;
  while (at < header.size()) {
    const std::size_t end = std::min(header.find(' ', at), header.size());
    if (header.compare(at, key.size(), key) == 0)
      return header.substr(at + key.size(), end - at - key.size());
    at = end + 1;
  }
  throw std::runtime_error("swarm request header '" + header + "' has no " + name);
}

template <class T>
std::span<const T> view(const RpcMessage& message, std::size_t offset_bytes, std::size_t count) {
  // A payload's bytes are a std::vector<char>, whose storage is aligned for any fundamental
  // type; every array starts at a multiple of 4 bytes.
  return {reinterpret_cast<const T*>(message.payload.data() + offset_bytes), count};
}

}  // namespace

RpcMessage stage_request(const std::string& method, int batch, std::int64_t micro_batch,
                         std::span<const float> input, std::span<const float> output_grad,
                         std::span<const std::int32_t> targets) {
  RpcMessage m;
  m.method = method;
  m.header = "batch=" + std::to_string(batch) + " mb=" + std::to_string(micro_batch);
  m.payload.reserve(input.size_bytes() + output_grad.size_bytes() + targets.size_bytes());
  append(m.payload, input);
  append(m.payload, output_grad);
  append(m.payload, targets);
  return m;
}

StageRequest read_stage_request(const RpcMessage& message, std::size_t boundary_floats,
                                int seq_len) {
  StageRequest r;
  r.method = message.method;
  r.batch = std::stoi(header_value(message.header, "batch"));
  if (r.batch < 1) throw std::runtime_error("swarm request of batch " + std::to_string(r.batch));
  r.micro_batch = std::stoll(header_value(message.header, "mb"));
  const std::size_t B = static_cast<std::size_t>(r.batch);
  const std::size_t activations = B * boundary_floats, positions = B * seq_len;
  std::size_t expected = activations * sizeof(float);
  if (r.method == kBackward)
    expected += activations * sizeof(float);
  else if (r.method == kLoss || r.method == kEvaluate)
    expected += positions * sizeof(std::int32_t);
  else if (r.method != kForward)
    throw std::runtime_error("unknown swarm request '" + r.method + "'");
  if (message.payload.size() != expected)
    throw std::runtime_error(
        "swarm request '" + r.method + "' of batch " + std::to_string(r.batch) + " carries " +
        std::to_string(message.payload.size()) + " bytes, expected " + std::to_string(expected));
  r.input = view<float>(message, 0, activations);
  const std::size_t after_input = activations * sizeof(float);
  if (r.method == kBackward) r.output_grad = view<float>(message, after_input, activations);
  if (r.method == kLoss || r.method == kEvaluate)
    r.targets = view<std::int32_t>(message, after_input, positions);
  return r;
}

RpcMessage stage_reply(std::span<const float> floats, double loss_sum) {
  RpcMessage m;
  m.method = "ok";
  char text[64];
  std::snprintf(text, sizeof text, "loss_sum=%.17g", loss_sum);
  m.header = text;
  append(m.payload, floats);
  return m;
}

std::vector<float> reply_floats(const RpcMessage& reply, std::size_t expected) {
  if (reply.payload.size() != expected * sizeof(float))
    throw std::runtime_error("swarm reply carries " + std::to_string(reply.payload.size()) +
                             " bytes, expected " + std::to_string(expected * sizeof(float)));
  std::vector<float> out(expected);
  if (expected > 0) std::memcpy(out.data(), reply.payload.data(), reply.payload.size());
  return out;
}

double reply_loss_sum(const RpcMessage& reply) {
  return std::stod(header_value(reply.header, "loss_sum"));
}

}  // namespace strata::swarm
