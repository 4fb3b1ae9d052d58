// The data a run trains and evaluates on (config `data`, docs/ARCHITECTURE.md §5): the training
// sources of data.train (one split, or a weighted mixture: data/mixture.h), each source's own
// validation split, and data.val. Every split is opened once, at start-up, and checked against the
// model's vocabulary and the run's tokenizer, each error naming its key (data.train[1].val, ...).
//
// Samples: global sample g reads MixtureSampler::sample(g); with data.train a string that is
// exactly the plain WindowSampler of that split (so runs without a mixture read what they always
// read). What each source has drawn is a pure function of the number of samples read
// (drawn_before), so the metrics need no state and a resumed run reports what the uninterrupted
// one would.
//
// Validation: each source with a `val` has its own val_loss. The run's val_loss is data.val's
// when data.val is set; otherwise the mean of the sources' val_loss weighted by their shares
// (among the sources that have a `val`), the loss of a validation set mixed like the training
// data (evaluation_weights).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "data/mixture.h"
#include "data/token_shards.h"
#include "plan/config.h"

namespace strata {

class TrainingData {
 public:
  struct Source {
    std::string name;
    std::string key;   // where the config sets it: "data.train" or "data.train[i]"
    double share = 1;  // realised share of the training samples (MixtureSchedule::share)
    TokenSource train;
    std::optional<TokenSource> val;
  };

  // Opens every split of config.data; strata::Error naming the key of one that cannot be opened
  // or holds fewer than seq_len + 1 tokens.
  explicit TrainingData(const Config& config);
  // The sampler points into the sources: neither copied nor moved.
  TrainingData(const TrainingData&) = delete;
  TrainingData& operator=(const TrainingData&) = delete;

  // Checks every split against model.vocab_size and data.tokenizer (with none: the sources
  // against each other, all made with one tokenizer); returns the tokenizer's model bytes for
  // checkpoints ("" without one). strata::Error naming the key otherwise.
  std::string check(const Config& config) const;
  // The shards' ids came without a tokenizer (tokenizer_sha256 kNoTokenizer, which check() makes
  // every split share): checkpoints record it, so that generate can say why it has no text.
  bool without_tokenizer() const;
  // The `note:` line for the splits whose shards have no checksums ("" when all have them).
  std::string missing_checksums_note() const;

  // Fills inputs[0..T) and targets[0..T) for global sample g.
  void sample(std::uint64_t global_sample, std::int32_t* inputs, std::int32_t* targets) const {
    sampler_.sample(global_sample, inputs, targets);
  }
  // data.train is a list (the metrics then report each source).
  bool is_mixture() const { return is_mixture_; }
  const std::vector<Source>& sources() const { return sources_; }
  const std::optional<TokenSource>& val() const { return val_; }
  // Some split is evaluated: data.val or a source's val.
  bool evaluates() const;
  // Samples each source has drawn among global samples [0, end).
  std::vector<std::uint64_t> drawn_before(std::uint64_t end) const {
    return sampler_.schedule().drawn_before(end);
  }
  // The weight of each source's val_loss in the run's val_loss when data.val is not set: its
  // share, renormalised over the sources with a val (0 for those without).
  std::vector<double> evaluation_weights() const;

  // Start-up lines of a mixture: each source's weight, share, size in tokens and windows, and
  // the epochs of it that `samples_in_run` samples read, and its val.
  void describe(std::ostream& out, const Config& config, std::uint64_t samples_in_run) const;

 private:
  bool is_mixture_;
  std::vector<Source> sources_;
  std::optional<TokenSource> val_;
  MixtureSampler sampler_;
};

}  // namespace strata
