// `bench checkpoint`: what a checkpoint costs to write and to check, and how much of that is its
// checksums (docs/ARCHITECTURE.md §5 "Checkpoints"). One process writes the parameters and both
// AdamW moments of a model of the given shape (GPT-2 124M by default: 3 × 124M fp32 values, about
// 1.5 GB) with the trainer's own writer, then times, in order:
//   write_s         write_checkpoint: the datasets, their per-tensor checksums, the seal, the
//   rename; verify_s        verify_checkpoint on the new file: its seal, then every tensor's
//   checksum (the
//                   first read of a resume's choice of checkpoint,
//                   train/checkpoint/checkpoint_verify.h);
//   seal_s          seal_checkpoint_file alone on the same file (the byte checksum of every block);
//   seal_check_s    check_checkpoint_seal alone on the file so sealed again (a new file version);
// and two checksum rates over the in-memory parameters: checksum_bytes (the seal's and the
// tokenizer's byte checksum) and the per-tensor element checksum (checksum_slice).
// The file was just written, so it is read from the page cache: the read figures are what the
// checks cost in CPU, not the disk's speed. The file is removed at the end.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "model/parameter_layout.h"
#include "tools/bench.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_seal.h"
#include "train/checkpoint/checkpoint_verify.h"

namespace strata::bench {
namespace fs = std::filesystem;

namespace {
// GiB per second of `bytes` handled in `seconds`.
double gib_per_s(double bytes, double seconds) { return bytes / seconds / double(1 << 30); }
}  // namespace

CommandSpec checkpoint_command() {
  return {
      "usage: bench checkpoint [--n-layer N] [--n-head N] [--d-model N] [--seq-len N] "
      "[--vocab N] [--dir DIR]",
      "Times writing, verifying and reading a checkpoint of a GPT of this shape with AdamW's "
      "moments: one JSON line with GiB/s.",
      {{"--n-layer", "N", "12", "transformer blocks"},
       {"--n-head", "N", "12", "attention heads"},
       {"--d-model", "N", "768", "model width"},
       {"--seq-len", "N", "1024", "context length"},
       {"--vocab", "N", "50257", "vocabulary size"},
       {"--dir", "DIR", (fs::temp_directory_path() / "strata-bench-checkpoint").string(),
        "where the checkpoint is written (and removed)"}}};
}

void bench_checkpoint(const ToolArgs& args) {
  const GptShape shape{positive(args, "--n-layer"), positive(args, "--n-head"),
                       positive(args, "--d-model"), positive(args, "--seq-len"),
                       positive(args, "--vocab")};
  const fs::path directory = args.get("--dir");
  const ParameterLayout layout = ParameterLayout::for_gpt(shape);
  const ElementRange all{0, layout.total()};
  // Moments that differ from the parameters, so no two datasets hold the same bytes.
  std::vector<StateBuffer> buffers{{"model", all, std::vector<float>(layout.total())},
                                   {"optimizer/m", all, {}},
                                   {"optimizer/v", all, {}}};
  initialize_gpt_parameters(layout, shape, 1234, buffers[0].values.data());
  buffers[1].values = buffers[0].values;
  buffers[2].values = buffers[0].values;
  for (std::size_t i = 0; i < layout.total(); ++i) {
    buffers[1].values[i] *= 0.125f;
    buffers[2].values[i] *= buffers[2].values[i];
  }
  CheckpointMeta meta;
  meta.config_yaml = "bench: checkpoint\n";
  meta.state.step = 1;
  const CheckpointWriter writer{&layout, shape, {all}, nullptr, {}};

  auto start = Clock::now();
  const std::string path = write_checkpoint(directory.string(), writer, meta, buffers);
  const double write_s = seconds_since(start);
  start = Clock::now();
  const CheckpointSummary summary = verify_checkpoint(path);
  const double verify_s = seconds_since(start);
  start = Clock::now();
  seal_checkpoint_file(path);
  const double seal_s = seconds_since(start);
  start = Clock::now();
  check_checkpoint_seal(path);
  const double seal_check_s = seconds_since(start);
  const auto file_bytes = static_cast<double>(fs::file_size(path));
  fs::remove(path);

  const std::vector<float>& params = buffers[0].values;
  const double param_bytes = static_cast<double>(params.size() * sizeof(float));
  start = Clock::now();
  const std::uint64_t byte_sum = checksum_bytes(params.data(), params.size() * sizeof(float));
  const double bytes_s = seconds_since(start);
  TensorSlice whole;  // the parameters as one logical tensor
  whole.mid = whole.mid_count = static_cast<std::int64_t>(params.size());
  start = Clock::now();
  const std::uint64_t element_sum = checksum_slice(params.data(), whole, 0, whole.mid);
  const double elements_s = seconds_since(start);

  JsonLine json = JsonLine()
                      .add("bench", "checkpoint")
                      .add("format", checkpoint_format_name(CheckpointFormat::v4))
                      .add("tensors", summary.tensors)
                      .add("values", summary.values)
                      .add("file_mib", file_bytes / double(1 << 20), "%.1f")
                      .add("write_s", write_s, "%.3f")
                      .add("verify_s", verify_s, "%.3f")
                      .add("seal_s", seal_s, "%.3f")
                      .add("seal_check_s", seal_check_s, "%.3f")
                      .add("checksum_bytes_gib_per_s", gib_per_s(param_bytes, bytes_s), "%.2f")
                      .add("element_checksum_gib_per_s", gib_per_s(param_bytes, elements_s), "%.2f")
                      // Printed so that the compiler cannot drop the timed sums.
                      .add("checksums", std::to_string(byte_sum ^ element_sum));
  std::printf("%s\n", json.str().c_str());
}

}  // namespace strata::bench
