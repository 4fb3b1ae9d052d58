#include "train/training_data.h"

#include <cstdio>

#include "data/tokenizer.h"
#include "model/core/error.h"

namespace strata {
namespace {

// The split `spec` of the config key `key`; errors say which key named it.
TokenSource open_split(const std::string& spec, const std::string& key) {
  try {
    return TokenSource::open(spec);
  } catch (const Error& e) {
    fail(key, ": ", e.what());
  }
}

// The key of a source's training shards in messages.
std::string train_key(const TrainingData::Source& s, bool listed) {
  return listed ? s.key + ".path" : s.key;
}

std::vector<TrainingData::Source> open_sources(const Config& config) {
  const bool listed = !config.data.mixture.empty();
  std::vector<TrainingData::Source> sources;
  const std::vector<DataSource> configured = config.data.train_sources();
  for (std::size_t i = 0; i < configured.size(); ++i) {
    const DataSource& c = configured[i];
    const std::string key = listed ? "data.train[" + std::to_string(i) + "]" : "data.train";
    TrainingData::Source source{c.name, key, 1.0, open_split(c.path, listed ? key + ".path" : key),
                                std::nullopt};
    const std::uint64_t needed = static_cast<std::uint64_t>(config.model.seq_len) + 1;
    if (source.train.size() < needed)
      fail(train_key(source, listed), ": the shards ('", source.train.files().front(), "'",
           source.train.files().size() > 1 ? "..." : "", ") hold ", source.train.size(),
           " tokens, fewer than model.seq_len + 1 = ", needed);
    if (!c.val.empty()) source.val = open_split(c.val, source.key + ".val");
    sources.push_back(std::move(source));
  }
  return sources;
}

MixtureSampler make_sampler(const std::vector<TrainingData::Source>& sources,
                            const Config& config) {
  std::vector<const TokenSource*> splits;
  for (const TrainingData::Source& s : sources) splits.push_back(&s.train);
  const std::vector<DataSource> configured = config.data.train_sources();
  std::vector<double> weights;
  for (const DataSource& c : configured) weights.push_back(c.weight);
  return MixtureSampler(splits, weights, config.model.seq_len, config.run.seed);
}

void check_vocabulary(const TokenSource& split, const std::string& key, int vocab_size) {
  if (split.info().vocab_size > vocab_size)
    fail(key, ": the shards use a vocabulary of ", split.info().vocab_size,
         " tokens but model.vocab_size is ", vocab_size);
}

}  // namespace

TrainingData::TrainingData(const Config& config)
    : is_mixture_(!config.data.mixture.empty()),
      sources_(open_sources(config)),
      val_(config.data.val.empty() ? std::nullopt
                                   : std::optional(open_split(config.data.val, "data.val"))),
      sampler_(make_sampler(sources_, config)) {
  for (std::size_t s = 0; s < sources_.size(); ++s)
    sources_[s].share = sampler_.schedule().share(s);
}

std::string TrainingData::check(const Config& config) const {
  const int vocab_size = config.model.vocab_size;
  for (const Source& s : sources_) {
    check_vocabulary(s.train, train_key(s, is_mixture_), vocab_size);
    if (s.val) check_vocabulary(*s.val, s.key + ".val", vocab_size);
  }
  if (val_) check_vocabulary(*val_, "data.val", vocab_size);

  std::string tokenizer_model, digest;
  if (!config.data.tokenizer.empty()) {
    const Tokenizer tokenizer = Tokenizer::load(config.data.tokenizer);
    digest = tokenizer.sha256();
    tokenizer_model = tokenizer.serialized();
    const std::string& made_with = sources_.front().train.info().tokenizer_sha256;
    if (!is_mixture_ && made_with == kNoTokenizer)
      fail("data.tokenizer '", config.data.tokenizer,
           "': the training shards hold ids converted without a tokenizer (tokenizer_sha256 "
           "\"none\", tokenize --from-tokens); leave data.tokenizer out to train on their ids");
    if (!is_mixture_ && !made_with.empty() && made_with != digest)
      fail("data.tokenizer '", config.data.tokenizer,
           "' is not the tokenizer the training shards were made with (sha256 differs)");
  } else {
    // No tokenizer to compare with: every split against the first that records its tokenizer,
    // since ids of two vocabularies mixed in one run would mean nothing.
    for (const Source& s : sources_)
      if (digest.empty()) digest = s.train.info().tokenizer_sha256;
  }
  // The same ids from another tokenizer mean other text: in training a mixture of languages
  // that are not one, in validation a val_loss of nothing.
  for (const Source& s : sources_) {
    check_shards_tokenizer(s.train, digest, train_key(s, is_mixture_));
    if (s.val) check_shards_tokenizer(*s.val, digest, s.key + ".val");
  }
  if (val_) check_shards_tokenizer(*val_, digest, "data.val");
  return tokenizer_model;
}

bool TrainingData::without_tokenizer() const {
  return sources_.front().train.info().tokenizer_sha256 == kNoTokenizer;
}

std::string TrainingData::missing_checksums_note() const {
  std::vector<std::pair<std::string, const TokenSource*>> splits;
  for (const Source& s : sources_) {
    splits.emplace_back(train_key(s, is_mixture_), &s.train);
    if (s.val) splits.emplace_back(s.key + ".val", &*s.val);
  }
  if (val_) splits.emplace_back("data.val", &*val_);
  return strata::missing_checksums_note(splits);
}

bool TrainingData::evaluates() const {
  if (val_) return true;
  for (const Source& s : sources_)
    if (s.val) return true;
  return false;
}

std::vector<double> TrainingData::evaluation_weights() const {
  std::vector<double> weights;
  double total = 0;
  for (const Source& s : sources_) {
    weights.push_back(s.val ? s.share : 0.0);
    total += weights.back();
  }
  if (total > 0)
    for (double& w : weights) w /= total;
  return weights;
}

void TrainingData::describe(std::ostream& out, const Config& config,
                            std::uint64_t samples_in_run) const {
  const std::vector<DataSource> configured = config.data.train_sources();
  out << "data: a mixture of " << sources_.size() << (sources_.size() == 1 ? " source" : " sources")
      << ", weights normalised to shares of the training samples, drawn in blocks of "
      << kMixtureBlock << " samples\n";
  for (std::size_t s = 0; s < sources_.size(); ++s) {
    const Source& source = sources_[s];
    const std::uint64_t windows = sampler_.source_sampler(s).windows_per_epoch();
    const double epochs =
        static_cast<double>(samples_in_run) * source.share / static_cast<double>(windows);
    char line[256];
    std::snprintf(line, sizeof line,
                  "  %s: weight %g = %.2f%% | %llu tokens, %llu windows of %d | %.3g epochs in "
                  "the run",
                  source.name.c_str(), configured[s].weight, 100 * source.share,
                  static_cast<unsigned long long>(source.train.size()),
                  static_cast<unsigned long long>(windows), config.model.seq_len, epochs);
    out << line << (source.val ? " | val " + configured[s].val : std::string()) << "\n";
  }
}

}  // namespace strata
