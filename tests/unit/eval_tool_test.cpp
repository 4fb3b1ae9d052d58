// The `eval` tool. `--multiple-choice` on a model whose answers are forced: it always predicts
// "▁beta", so an ending's score is known from its tokens, and the file's mc_acc and mc_acc_norm
// (with the rules of train/multiple_choice.h: sums against sums per token, ties to the first
// ending, a context cut from the left) are known exactly; bad files are one error line naming file
// and line. `--data`: the val_loss line says what was measured and where N came from (an imported
// checkpoint once evaluated the default 65,536 tokens without a word). Its OpenMP threads wait
// passively (tools/tool_threads.h).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "tests/support/checkpoint_support.h"
#include "tests/support/test_support.h"

namespace strata {
namespace {

using testing::TempDir;

// seq_len 8, so a context of 20 words is cut; 320 pieces make "▁beta" one piece.
const GptShape kShape{2, 2, 16, 8, 320};

struct Fixture {
  TempDir dir{"eval_multiple_choice"};
  Tokenizer tokenizer = testing::small_tokenizer(kShape.vocab_size);
  std::string checkpoint;
  Fixture() {
    checkpoint = testing::write_strata_checkpoint(
        dir / "ckpt", kShape,
        testing::always_predicting(kShape, tokenizer.encode_after_space("beta").at(0)),
        tokenizer.serialized());
  }
  testing::CommandResult eval(const std::string& file_text, const std::string& extra = "") const {
    std::ofstream(dir / "choices.jsonl") << file_text;
    return testing::run_command("OMP_NUM_THREADS=1 " + testing::bin("eval") + " --checkpoint " +
                                checkpoint + " --multiple-choice " + (dir / "choices.jsonl") +
                                extra);
  }
};

TEST(EvalMultipleChoice, ForcedAnswersGiveTheKnownAccuracies) {
  const Fixture f;
  for (const char* word : {"beta", "gamma", "delta"}) {
    ASSERT_EQ(f.tokenizer.encode_after_space(word).size(), 1u) << "'▁" << word << "' is one piece";
    // The context's ids and the ending's are the ids of the joined text.
    std::vector<int> joined = f.tokenizer.encode("alpha");
    for (int id : f.tokenizer.encode_after_space(word)) joined.push_back(id);
    EXPECT_EQ(joined, f.tokenizer.encode(std::string("alpha ") + word));
  }
  std::string long_context;
  for (int i = 0; i < 20; ++i) long_context += i % 2 ? " kappa" : " zeta";
  // p(beta) ≈ e/(e + 319), any other ≈ 1/(e + 319): log-probabilities about −4.8 and −5.8.
  const std::string file =
      // beta wins both ways: right.
      "{\"ctx\": \"alpha\", \"endings\": [\"gamma\", \"beta\"], \"label\": 1}\n"
      // Two betas (−9.5) lose to gamma (−5.8) by sum, win per token (−4.8): only norm is right.
      "{\"ctx\": \"alpha\", \"endings\": [\"gamma\", \"beta beta\"], \"label\": 1}\n"
      "\n"  // skipped
      // Equal scores: the first ending is chosen, so label 1 is wrong both ways.
      "{\"ctx\": \"theta\", \"endings\": [\"beta\", \"beta\"], \"label\": 1, \"extra\": 0}\n"
      // A context past seq_len is cut from the left; an empty one is EOS: right.
      "{\"ctx\": \"" +
      long_context +
      "\", \"endings\": [\"delta\", \"beta\"], \"label\": 1}\n"
      "{\"ctx\": \"\", \"endings\": [\"delta\", \"gamma\", \"beta\"], \"label\": 2}\n";
  const auto run = f.eval(file, " --scores " + (f.dir / "scores.jsonl"));
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_EQ(run.output, "mc_acc 0.600000 mc_acc_norm 0.800000 over 5 examples\n");
  const std::string scores = testing::read_file(f.dir / "scores.jsonl");
  EXPECT_NE(scores.find("{\"line\": 4, \"label\": 1, "), std::string::npos) << scores;
  EXPECT_NE(scores.find("\"chosen\": 0, \"chosen_norm\": 1}"), std::string::npos) << scores;
}

TEST(EvalMultipleChoice, BadLinesAreOneErrorNamingFileAndLine) {
  const Fixture f;
  const std::string good =
      "{\"ctx\": \"alpha\", \"endings\": [\"gamma\", \"beta\"], \"label\": 0}\n";
  const std::string path = f.dir / "choices.jsonl";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{\"ctx\": \"alpha\", \"endings\": [\"gamma\", \"beta\"], \"label\": 0", "not JSON"},
      {"[1, 2]", "a line must be a JSON object"},
      {"{\"endings\": [\"gamma\", \"beta\"], \"label\": 0}", "no \"ctx\" field"},
      {"{\"ctx\": \"a\", \"label\": 0}", "no \"endings\" field"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\", \"beta\"]}", "no \"label\" field"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\", \"beta\"], \"label\": 2}",
       "\"label\" 2 is out of range for 2 endings"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\", \"beta\"], \"label\": \"1\"}",
       "\"label\" is a string, not an integer"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\"], \"label\": 0}",
       "\"endings\" has 1 entries; a choice needs at least 2"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\", \"\"], \"label\": 0}", "ending 1 is empty"},
      {"{\"ctx\": \"a\", \"endings\": [\"gamma\", \"a b c d e f g h i\"], \"label\": 0}",
       "ending 1 has"},
  };
  for (const auto& [line, reason] : cases) {
    SCOPED_TRACE(line);
    const auto run = f.eval(good + line + "\n" + good);
    EXPECT_NE(run.status, 0);
    EXPECT_EQ(run.output.rfind("error: " + path + ":2: " + reason, 0), 0u) << run.output;
    EXPECT_EQ(run.output.find('\n'), run.output.size() - 1) << "one line: " << run.output;
  }
}

// The val_loss line: what was measured, and where N came from.
TEST(EvalTool, SaysWhatItMeasuredAndWhereTheTokenCountCameFrom) {
  const Fixture f;
  testing::write_synthetic_dataset(f.dir / "data", 64, 4000);
  const std::string eval = "OMP_NUM_THREADS=1 " + testing::bin("eval") + " --data " +
                           (f.dir / "data/val") + " --checkpoint ";
  // The checkpoint's config has the default train.eval_tokens, 65536, more than the split.
  const auto own = testing::run_command(eval + f.checkpoint);
  ASSERT_EQ(own.status, 0) << own.output;
  EXPECT_NE(own.output.find(" (the first 65536 tokens of --data, from the checkpoint's "
                            "train.eval_tokens)\n"),
            std::string::npos)
      << own.output;
  // Legal but surely not meant: more tokens than the split holds is one warning line.
  EXPECT_NE(own.output.find("warning: --data '" + (f.dir / "data/val") + "' holds "),
            std::string::npos)
      << own.output;
  EXPECT_NE(own.output.find(" tokens, fewer than the 65536 asked for: all of them are evaluated\n"),
            std::string::npos)
      << own.output;
  const auto counted = testing::run_command(eval + f.checkpoint + " --tokens 33");
  EXPECT_EQ(counted.output.find("warning"), std::string::npos) << counted.output;
  ASSERT_EQ(counted.status, 0) << counted.output;
  // Windows of 8 in the first 33 tokens: 4, of 8 targets each.
  EXPECT_EQ(counted.output.rfind("val_loss ", 0), 0u) << counted.output;
  EXPECT_NE(counted.output.find(" over 32 tokens in 4 windows (the first 33 tokens of --data, from "
                                "--tokens)\n"),
            std::string::npos)
      << counted.output;

  const std::string ckpt = testing::bin("ckpt");
  const auto exported =
      testing::run_command(ckpt + " export-hf " + f.checkpoint + " " + (f.dir / "hf"));
  ASSERT_EQ(exported.status, 0) << exported.output;
  const auto imported =
      testing::run_command(ckpt + " import-hf " + (f.dir / "hf") + " " + (f.dir / "imported.h5"));
  ASSERT_EQ(imported.status, 0) << imported.output;
  const auto from_hf = testing::run_command(eval + (f.dir / "imported.h5"));
  ASSERT_EQ(from_hf.status, 0) << from_hf.output;
  EXPECT_NE(from_hf.output.find("(the first 65536 tokens of --data, the default: a checkpoint of "
                                "ckpt import-hf records no run's train.eval_tokens)\n"),
            std::string::npos)
      << from_hf.output;
}

// libgomp reads its wait policy when it loads: eval re-executes itself with OMP_WAIT_POLICY=PASSIVE
// so that the runtime it runs on spins 0 times (OMP_DISPLAY_ENV=verbose shows each runtime's
// GOMP_SPINCOUNT: 300000 by default); a policy the user set is kept.
TEST(EvalTool, OpenMpWaitsPassivelyUnlessTheUserSaysOtherwise) {
  const Fixture f;
  const std::string command = testing::bin("eval") + " --checkpoint " + f.checkpoint +
                              " --threads 2 --multiple-choice " + (f.dir / "choices.jsonl");
  std::ofstream(f.dir / "choices.jsonl")
      << "{\"ctx\": \"alpha\", \"endings\": [\"gamma\", \"beta\"], \"label\": 1}\n";
  auto last_spin_count = [](const std::string& output) {
    const auto at = output.rfind("GOMP_SPINCOUNT = '");
    return at == std::string::npos ? std::string("none")
                                   : output.substr(at + 18, output.find('\'', at + 18) - at - 18);
  };
  const auto passive = testing::run_command("OMP_DISPLAY_ENV=verbose " + command);
  ASSERT_EQ(passive.status, 0) << passive.output;
  EXPECT_EQ(last_spin_count(passive.output), "0") << passive.output;
  EXPECT_NE(passive.output.find("mc_acc 1.000000 mc_acc_norm 1.000000 over 1 examples"),
            std::string::npos)
      << passive.output;
  const auto active =
      testing::run_command("OMP_DISPLAY_ENV=verbose OMP_WAIT_POLICY=active " + command);
  ASSERT_EQ(active.status, 0) << active.output;
  EXPECT_EQ(last_spin_count(active.output), "30000000000") << active.output;
}

}  // namespace
}  // namespace strata
