// DiLoCo (train/diloco/diloco.h) end to end under mpirun: one worker with outer lr 1 and momentum 0
// is plain training bit for bit; a run depends on (config, workers), not on each worker's inner
// layout; a run stopped in the middle of a period resumes bit-exactly under every averaging
// algorithm, with compression, error feedback and drops; the bytes across the worker boundary are
// the analytic count; streaming syncs each fragment once per period at its offset; bad
// combinations stop with one error line.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>

#include "model/parameter_layout.h"
#include "parallel/comm/communicator.h"
#include "parallel/diloco/outer_compression.h"
#include "parallel/diloco/worker_averaging.h"
#include "tests/mpi/layout_runs.h"
#include "tests/support/test_support.h"
#include "train/diloco/diloco_fragments.h"
#include "train/optimizer/lr_schedule.h"
#include "train/step_report.h"

namespace strata {
namespace {

using testing::expect_close;
using testing::Layout;
using testing::metric;
using testing::read_file;
using testing::run_command;
using testing::TempDir;

// The layout suite's config: 4 layers, d_model 32, vocabulary 64, sequences of 16.
const GptShape kShape{4, 4, 32, 16, 64};

std::string diloco(int workers, int inner_steps, const std::string& more = "") {
  return " --set diloco.enabled=true --set diloco.workers=" + std::to_string(workers) +
         " --set diloco.inner_steps=" + std::to_string(inner_steps) + more;
}

class DilocoRuns : public testing::LayoutSuite<DilocoRuns> {
 public:
  static constexpr const char* kTag = "diloco";
  static constexpr int kHeads = 4;
  static Layout reference() { return Layout{}; }

 protected:
  // Trains `workers` workers of `layout` each.
  static std::string train(int workers, const Layout& layout, const std::string& name,
                           const std::string& extra) {
    const std::string command = testing::mpirun(workers * layout.ranks()) + testing::bin("train") +
                                " " + dir_->str() + "/config.yaml" + layout.overrides() +
                                " --set run.name=" + name + extra;
    const auto result = run_command(command);
    EXPECT_EQ(result.status, 0) << command << "\n" << result.output;
    last_output_ = result.output;
    return dir_->str() + "/runs/" + name;
  }
  static inline std::string last_output_;  // what the last train() printed

  // The metrics lines of a run that hold `key`.
  static std::vector<std::string> lines_with(const std::string& run, const std::string& key) {
    std::vector<std::string> lines;
    std::istringstream in(read_file(run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);)
      if (line.find("\"" + key + "\": ") != std::string::npos) lines.push_back(line);
    return lines;
  }
};

double number_after(const std::string& line, const std::string& key) {
  const std::size_t at = line.find("\"" + key + "\": ");
  EXPECT_NE(at, std::string::npos) << key << " in " << line;
  return at == std::string::npos ? -1 : std::strtod(line.c_str() + at + key.size() + 4, nullptr);
}

TEST_F(DilocoRuns, OneWorkerWithOuterLr1AndNoMomentumIsPlainTrainingBitForBit) {
  const std::string steps = " --set train.steps=30 --set train.eval_every=10";
  const std::string plain = train(1, Layout{}, "plain30", steps);
  const std::string one = train(1, Layout{}, "one_worker",
                                steps + diloco(1, 5,
                                               " --set diloco.outer_lr=1 "
                                               "--set diloco.outer_momentum=0"));
  ASSERT_EQ(metric(plain, "loss").size(), 30u);
  EXPECT_EQ(metric(one, "loss"), metric(plain, "loss"));  // exact
  EXPECT_EQ(metric(one, "val_loss"), metric(plain, "val_loss"));
  EXPECT_EQ(lines_with(one, "outer_step").size(), 6u);  // after steps 5, 10, … 30
  // On 2 data-parallel ranks too (the share is averaged, then gathered over dp).
  const std::string dp2 = train(1, Layout{2}, "one_worker_dp2",
                                steps + diloco(1, 5,
                                               " --set diloco.outer_lr=1 "
                                               "--set diloco.outer_momentum=0"));
  expect_close(metric(dp2, "loss"), metric(plain, "loss"), 0, "dp 2");
}

TEST_F(DilocoRuns, AnyInnerLayoutTrainsTheSameRun) {
  const std::string settings = diloco(2, 4);
  const std::string lone = train(2, Layout{}, "layout_lone", settings);
  const std::vector<double> loss = metric(lone, "loss"), val = metric(lone, "val_loss");
  ASSERT_EQ(loss.size(), 20u);
  // The workers differ (their own data): the run is not plain training.
  EXPECT_NE(loss, metric(reference_dir_, "loss"));
  for (const Layout& layout : {Layout{1, 2, 1}, Layout{2, 1, 2}, Layout{2, 1, 2, "gpipe"}}) {
    SCOPED_TRACE(layout.name());
    const std::string run = train(2, layout, "layout_" + layout.name(), settings);
    expect_close(metric(run, "loss"), loss, 0, "loss");
    expect_close(metric(run, "val_loss"), val, 0, "val_loss");
    expect_close(metric(run, "outer_grad_norm"), metric(lone, "outer_grad_norm"), 0,
                 "outer gradient norm");
  }
  // ZeRO inside a worker: stage 3 holds only its shard, so the outer step needs no gather.
  const std::string zero =
      train(2, Layout{2}, "layout_zero3", settings + " --set parallel.zero.stage=3");
  expect_close(metric(zero, "loss"), loss, 0, "ZeRO-3 loss");
  // Streaming: a fragment is a set of the model's tensors, the same on every layout; a cut inside
  // a block and the tied wte on both pipeline ends (pp 2, ZeRO-1 over dp 2).
  const std::string streaming = diloco(2, 4, " --set diloco.fragments=2");
  const std::string streaming_lone = train(2, Layout{}, "layout_streaming_lone", streaming);
  const std::string streaming_3d = train(2, Layout{2, 1, 2}, "layout_streaming_dp2pp2",
                                         streaming + " --set parallel.zero.stage=1");
  expect_close(metric(streaming_3d, "loss"), metric(streaming_lone, "loss"), 0, "streaming loss");
  expect_close(metric(streaming_3d, "outer_grad_norm"), metric(streaming_lone, "outer_grad_norm"),
               0, "streaming outer gradient norm");
}

TEST_F(DilocoRuns, ResumesBitExactlyInTheMiddleOfAPeriod) {
  namespace fs = std::filesystem;
  const std::map<std::string, std::string> variants = {
      {"all_reduce", diloco(4, 4)},
      {"butterfly", diloco(4, 4, " --set diloco.averaging=butterfly")},
      {"gossip", diloco(4, 4, " --set diloco.averaging=gossip")},
      {"moshpit", diloco(4, 4, " --set diloco.averaging=moshpit")},
      {"int4_feedback_drops",
       diloco(4, 4,
              " --set diloco.compression=int4 --set diloco.error_feedback=true "
              "--set diloco.drop_probability=0.3")},
      {"streaming", diloco(2, 4, " --set diloco.fragments=2 --set diloco.compression=bf16")},
      {"outer_schedule", diloco(2, 4, " --set diloco.outer_schedule=inner")},
      // fp16: every worker's own dynamic loss scale and AdamW step count are checkpointed.
      {"fp16", diloco(2, 4, " --set precision.compute=fp16")},
      // Step 10 is a sync of its own: its reduction, to overlap step 11, is still to start.
      {"overlap", diloco(2, 5, " --set diloco.overlap=true --set diloco.averaging=butterfly")},
      {"overlap_streaming", diloco(2, 4,
                                   " --set diloco.overlap=true --set diloco.fragments=4 --set "
                                   "diloco.compression=int8 --set diloco.error_feedback=true")},
  };
  for (const auto& [name, settings] : variants) {
    SCOPED_TRACE(name);
    const int workers = settings.find("workers=2") != std::string::npos ? 2 : 4;
    const std::string straight = train(workers, Layout{}, "resume_" + name + "_straight", settings);
    // Stopped after step 10: 2 steps into the third period.
    const std::string split = "resume_" + name + "_split";
    const std::string first =
        train(workers, Layout{}, split, settings + " --set train.stop_after=10");
    ASSERT_TRUE(fs::exists(first + "/checkpoints/step_00000010.h5"));
    const std::string second = train(workers, Layout{}, split, settings + " --resume");
    EXPECT_EQ(metric(second, "loss"), metric(straight, "loss"));  // exact
    EXPECT_EQ(metric(second, "val_loss"), metric(straight, "val_loss"));
    EXPECT_EQ(metric(second, "outer_grad_norm"), metric(straight, "outer_grad_norm"));
  }
}

// diloco.outer_schedule inner: each outer step's scale is the inner learning rate of the period's
// last step over its peak (in the warm-up and as the cosine decays), and the run differs from the
// constant schedule's from the first scaled step on.
TEST_F(DilocoRuns, TheInnerOuterScheduleScalesEachOuterStepByTheInnerRate) {
  const std::string constant = train(2, Layout{}, "schedule_constant", diloco(2, 4));
  const std::string inner =
      train(2, Layout{}, "schedule_inner", diloco(2, 4, " --set diloco.outer_schedule=inner"));
  EXPECT_TRUE(lines_with(constant, "outer_scale").empty());
  const std::vector<std::string> lines = lines_with(inner, "outer_scale");
  ASSERT_EQ(lines.size(), 5u);  // after steps 4, 8, … 20
  OptimizerConfig schedule;     // the suite's (tests/mpi/layout_runs.h)
  schedule.lr = 3.0e-3;
  schedule.min_lr = 3.0e-4;
  schedule.warmup_steps = 4;
  for (const std::string& line : lines) {
    const auto step = static_cast<int>(number_after(line, "step"));
    const double expected = learning_rate(schedule, step - 1, 20) / schedule.lr;
    EXPECT_NEAR(number_after(line, "outer_scale"), expected, 1e-6) << line;
  }
  EXPECT_LT(number_after(lines.back(), "outer_scale"), 0.11);  // annealed near min_lr / lr
  // Steps 1-4 are the same; the first outer step (scale 1 after the warm-up's 4th step) too, so
  // the runs part after the second.
  const std::vector<double> a = metric(constant, "loss"), b = metric(inner, "loss");
  ASSERT_EQ(a.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  EXPECT_NE(a[8], b[8]);
}

TEST_F(DilocoRuns, ACheckpointResumesUnderAnotherInnerLayout) {
  // Every worker's parameters, AdamW moments, anchor, momentum and error-feedback residual are
  // logical tensors: stopped with one rank per worker, resumed with (dp 2, ZeRO-1) per worker.
  const std::string settings =
      diloco(2, 4, " --set diloco.compression=int8 --set diloco.error_feedback=true");
  const std::string straight = train(2, Layout{}, "reshard_straight", settings);
  train(2, Layout{}, "reshard", settings + " --set train.stop_after=10");
  const std::string resumed =
      train(2, Layout{2}, "reshard", settings + " --set parallel.zero.stage=1 --resume");
  const std::vector<double> loss = metric(straight, "loss");
  expect_close(metric(resumed, "loss"), loss, 0, "loss, resumed after step 10");
  expect_close(metric(resumed, "val_loss"), metric(straight, "val_loss"), 0, "val_loss");
}

TEST_F(DilocoRuns, BytesAcrossTheWorkerBoundaryAreTheAnalyticCount) {
  // One rank per worker: each averages its whole layout, wte in a call of its own.
  const ParameterLayout layout = ParameterLayout::for_gpt(kShape);
  const std::size_t wte = layout.at("wte").size;
  for (const std::string format : {"none", "int8"}) {
    for (int fragments : {1, 2}) {
      SCOPED_TRACE(format + std::string(" fragments ") + std::to_string(fragments));
      const int workers = 4;
      const std::string run =
          train(workers, Layout{}, "bytes_" + format + std::to_string(fragments),
                diloco(workers, 4,
                       " --set diloco.compression=" + format +
                           " --set diloco.fragments=" + std::to_string(fragments)));
      const std::vector<std::string> syncs = lines_with(run, "outer_step");
      // 20 steps: 5 periods, each fragment once per period.
      ASSERT_EQ(syncs.size(), static_cast<std::size_t>(5 * fragments));
      const OuterCompression codec = outer_compression_from_name(format);
      // The pieces of each fragment on a rank (train/diloco/diloco_fragments.h): wte in a call of
      // its own, then the rest of fragment 0; every other fragment in one call.
      const std::vector<int> fragment_of = diloco_tensor_fragments(kShape, fragments);
      std::vector<std::vector<std::size_t>> pieces(static_cast<std::size_t>(fragments));
      for (std::size_t t = 0; t < layout.tensors().size(); ++t) {
        const TensorView& tensor = layout.tensors()[t];
        if (tensor.name == "wte") continue;
        auto& list = pieces[static_cast<std::size_t>(fragment_of[t])];
        if (list.empty()) list.push_back(0);
        list.back() += tensor.size;
      }
      pieces[0].insert(pieces[0].begin(), wte);
      for (const std::string& line : syncs) {
        const int f = static_cast<int>(number_after(line, "fragment"));
        double expected = 0;
        for (int w = 0; w < workers; ++w) {
          expected += static_cast<double>(screening_bytes_sent(workers, w));
          for (std::size_t n : pieces[static_cast<std::size_t>(f)])
            expected += static_cast<double>(
                averaging_bytes_sent(Averaging::all_reduce, codec, n, workers, w, {}));
        }
        EXPECT_EQ(number_after(line, "inter_worker"), expected) << line;
      }
    }
  }
}

TEST_F(DilocoRuns, StreamingSyncsEachFragmentOncePerPeriodAtItsOffset) {
  const int H = 4, F = 4;
  const std::string run = train(2, Layout{}, "streaming_offsets",
                                diloco(2, H, " --set diloco.fragments=" + std::to_string(F)));
  std::map<int, std::vector<int>> steps_of;
  for (const std::string& line : lines_with(run, "outer_step"))
    steps_of[static_cast<int>(number_after(line, "fragment"))].push_back(
        static_cast<int>(number_after(line, "step")));
  ASSERT_EQ(steps_of.size(), static_cast<std::size_t>(F));
  for (int f = 0; f < F; ++f) {
    std::vector<int> expected;
    for (int s = 1; s <= 20; ++s)
      if ((s - f * H / F) % H == 0 && s >= f * H / F) expected.push_back(s);
    EXPECT_EQ(steps_of[f], expected) << "fragment " << f;
  }
  // Each sync names its fragment of F, its size, and the bytes with a unit; the metrics line says
  // the fragment's parameters, which add up to the model over the fragments.
  const std::vector<std::size_t> sizes = diloco_fragment_sizes(kShape, F);
  const std::string console = last_output_;
  for (int f = 0; f < F; ++f) {
    const std::string line = "outer sync after step " + std::to_string(f == 0 ? H : f * H / F) +
                             " | fragment " + std::to_string(f + 1) + "/" + std::to_string(F) +
                             " (" + human_count(static_cast<double>(sizes[f])) + " of ";
    EXPECT_NE(console.find(line), std::string::npos) << line << "\n" << console;
  }
  EXPECT_NE(console.find(" KiB across workers\n"), std::string::npos) << console;
  std::map<int, double> params_of;
  for (const std::string& line : lines_with(run, "outer_step")) {
    EXPECT_EQ(number_after(line, "fragments"), F) << line;
    params_of[static_cast<int>(number_after(line, "fragment"))] =
        number_after(line, "fragment_params");
  }
  double params = 0;
  for (const auto& [f, n] : params_of) params += n;
  EXPECT_EQ(params, static_cast<double>(ParameterLayout::for_gpt(kShape).total()));
}

TEST_F(DilocoRuns, OverlapAppliesEachSyncOneStepLate) {
  // One worker, outer lr 1, momentum 0: the sync after step s leaves θ_s, and applied after step
  // s+1 as new anchor + (θ_{s+1} − θ_s) it gives θ_{s+1} up to rounding: plain training's run.
  const std::string settings =
      diloco(1, 5,
             " --set diloco.outer_lr=1 --set diloco.outer_momentum=0 --set "
             "diloco.overlap=true");
  const std::string run = train(1, Layout{}, "overlap_one", settings);
  expect_close(metric(run, "loss"), metric(reference_dir_, "loss"), 0, "loss");
  // Every sync but the last overlaps the next step (the last is applied when training ends);
  // its hidden part is at most its time.
  const std::vector<std::string> syncs = lines_with(run, "outer_step");
  ASSERT_EQ(syncs.size(), 4u);  // after steps 5, 10, 15, 20
  for (const std::string& line : syncs)
    EXPECT_LE(number_after(line, "outer_hidden_s"), number_after(line, "outer_sync_s")) << line;
  EXPECT_EQ(number_after(syncs.back(), "outer_hidden_s"), 0.0);
  // With k workers the late application is not the synchronous run, but close to it.
  const std::string sync4 = train(4, Layout{}, "overlap_off", diloco(4, 5));
  const std::string late4 =
      train(4, Layout{}, "overlap_on", diloco(4, 5, " --set diloco.overlap=true"));
  // Each sync moves the same bytes, in flight or not, and its line counts them.
  const std::vector<std::string> on = lines_with(late4, "outer_step"),
                                 off = lines_with(sync4, "outer_step");
  ASSERT_EQ(on.size(), off.size());
  for (std::size_t i = 0; i < on.size(); ++i) {
    EXPECT_GT(number_after(off[i], "inter_worker"), 0) << off[i];
    EXPECT_EQ(number_after(on[i], "inter_worker"), number_after(off[i], "inter_worker")) << on[i];
  }
  const std::vector<double> a = metric(sync4, "val_loss"), b = metric(late4, "val_loss");
  ASSERT_EQ(a.size(), b.size());
  EXPECT_NE(a, b);
  EXPECT_NEAR(b.back(), a.back(), 0.05 * a.back());
}

TEST_F(DilocoRuns, BadCombinationsStopWithOneErrorLine) {
  struct Case {
    int ranks;
    std::string settings, says;
  };
  const Case cases[] = {
      {3, diloco(2, 4), "'diloco.workers' (2) must divide the world (3 ranks)"},
      {2, diloco(2, 4, " --set diloco.fragments=5"), "diloco.fragments"},
      {2, diloco(2, 6, " --set diloco.fragments=4"), "must divide diloco.inner_steps"},
      {2, diloco(2, 4, " --set diloco.drop_probability=1"), "diloco.drop_probability"},
  };
  for (const Case& c : cases) {
    const auto result = run_command(testing::mpirun(c.ranks) + testing::bin("train") + " " +
                                    dir_->str() + "/config.yaml --set run.name=bad" + c.settings);
    EXPECT_NE(result.status, 0) << c.settings;
    EXPECT_NE(result.output.find("error: "), std::string::npos) << result.output;
    EXPECT_NE(result.output.find(c.says), std::string::npos) << result.output;
  }
  // A checkpoint of 2 workers does not resume with 4.
  train(2, Layout{}, "workers_changed", diloco(2, 4, " --set train.stop_after=4"));
  const auto result =
      run_command(testing::mpirun(4) + testing::bin("train") + " " + dir_->str() +
                  "/config.yaml --set run.name=workers_changed --resume" + diloco(4, 4));
  EXPECT_NE(result.status, 0);
  EXPECT_NE(result.output.find("holds 2 DiLoCo worker(s) but this run has 4"), std::string::npos)
      << result.output;
}

}  // namespace
}  // namespace strata
