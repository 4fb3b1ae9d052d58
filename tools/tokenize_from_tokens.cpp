// tokenize --from-tokens: shards from the token files of llm.c or nanoGPT. Two passes over the
// files, as tokenize makes of text: the first checks every file and id and counts the documents
// (the validation split is a function of their count, data/split.h), the second writes them. No
// more than one block of ids is held at a time, whatever the corpus size.
#include <algorithm>
#include <cstdio>

#include "data/shard_set_writer.h"
#include "data/split.h"
#include "data/token_shards.h"
#include "model/core/error.h"
#include "tools/tokenize_modes.h"
#include "tools/tokenize_output.h"

namespace strata {
namespace {

constexpr std::size_t kBlockTokens = std::size_t{1} << 20;

// What a pass over the files saw; the second pass must see what the first did.
struct TokenStreamCount {
  std::uint64_t tokens = 0;
  std::size_t documents = 0;
  bool dropped_leading_eos = false;
  bool appended_final_eos = false;

  bool operator==(const TokenStreamCount&) const = default;
};

// One pass: every id of the files through the document cut, each run of ids to `emit`.
TokenStreamCount read_token_files(const TokenFilesOptions& options,
                                  const std::vector<std::string>& files,
                                  const EosDocuments::Emit& emit) {
  TokenFileReader reader(files, options.format, options.vocab_size);
  EosDocuments documents(options.eos_id, emit);
  TokenStreamCount count;
  std::vector<std::int32_t> block;
  while (reader.next(block, kBlockTokens)) {
    count.tokens += block.size();
    documents.feed(block);
  }
  documents.finish();
  count.documents = documents.documents();
  count.dropped_leading_eos = documents.dropped_leading_eos();
  count.appended_final_eos = documents.appended_final_eos();
  return count;
}

}  // namespace

void convert_token_files(const TokenFilesOptions& options) {
  if (options.eos_id < 0 || options.eos_id >= options.vocab_size)
    fail("--eos-id ", options.eos_id, " is outside the vocabulary [0, ", options.vocab_size,
         ") of --vocab-size");
  check_output_is_free(options.out, options.force);
  const std::vector<std::string> files = list_input_files(options.inputs);

  const TokenStreamCount first =
      read_token_files(options, files, [](std::size_t, std::span<const std::int32_t>) {});
  if (first.documents == 0)
    fail("--from-tokens: the token files hold no document (", first.tokens, " ids)");
  const std::vector<bool> is_validation =
      choose_validation_documents(first.documents, options.val_fraction);
  if (options.val_fraction > 0 && std::ranges::none_of(is_validation, [](bool v) { return v; }))
    fail("--val-fraction ", options.val_fraction, " holds out no document: the token files hold ",
         first.documents, " ", plural(first.documents, "document", "documents"),
         " (cut at --eos-id ", options.eos_id,
         "); pass --val-fraction 0 and convert a validation file of its own into "
         "another --out");

  const ShardInfo info{options.vocab_size, options.eos_id, kNoTokenizer};
  StagedOutput output(options.out);
  ShardSetWriter train(output.path("train").string(), info, options.shard_tokens);
  ShardSetWriter val(output.path("val").string(), info, options.shard_tokens);
  std::size_t val_documents = 0, last_document = ~std::size_t{0};
  const TokenStreamCount second = read_token_files(
      options, files, [&](std::size_t document, std::span<const std::int32_t> ids) {
        if (document >= is_validation.size()) return;  // more than pass 1 saw: refused below
        (is_validation[document] ? val : train).append(ids);
        if (document != last_document && is_validation[document]) ++val_documents;
        last_document = document;
      });
  if (second != first)
    fail("the token files changed while tokenize read them: the first pass found ", first.tokens,
         " ids in ", first.documents, " documents, the second ", second.tokens, " in ",
         second.documents);
  train.finish();
  val.finish();
  output.commit();

  std::printf(
      "tokenize: %zu documents (%zu train, %zu val) from %zu token %s, vocab_size %d, eos_id %d, "
      "no tokenizer; train %llu tokens in %zu %s, val %llu tokens in %zu %s%s -> %s\n",
      first.documents, first.documents - val_documents, val_documents, files.size(),
      plural(files.size(), "file", "files"), options.vocab_size, options.eos_id,
      static_cast<unsigned long long>(train.tokens()), train.shards(),
      plural(train.shards(), "shard", "shards"), static_cast<unsigned long long>(val.tokens()),
      val.shards(), plural(val.shards(), "shard", "shards"),
      first.dropped_leading_eos && first.appended_final_eos
          ? " (the EOS before each document now follows it)"
          : "",
      options.out.c_str());
}

}  // namespace strata
