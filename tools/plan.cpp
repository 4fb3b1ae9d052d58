// plan: the layout planner's tool (plan/search.h). Prices every layout of a config's model on a
// cluster and prints the best ones; its flags are kCommand's. The best plan is also printed as
// `--set` overrides for `train`. When the cluster's nodes are joined by a slow link, the DiLoCo
// verdict follows (plan/diloco_verdict.h). `plan --config-reference` prints the config keys'
// rows of docs/ARCHITECTURE.md §3 instead (plan/config_reference.h).
#include <yaml-cpp/yaml.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string_view>

#include "model/core/command_line.h"
#include "model/core/error.h"
#include "model/parameter_layout.h"
#include "plan/comm_model.h"
#include "plan/compute_model.h"
#include "plan/config.h"
#include "plan/config_reference.h"
#include "plan/diloco_verdict.h"
#include "plan/search.h"
#include "train/metrics/metrics.h"
#include "train/step_report.h"

namespace strata {
namespace {

const CommandSpec kCommand{
    "usage: plan CONFIG.yaml --cluster CLUSTER.yaml [--world N] [--top K] [--explain K] "
    "[--quantized true|false] [--layout search|given] [--json true|false] "
    "[--set key.path=value]... [--out FRAGMENT.yaml]",
    "Prices every layout (tp, pp, dp, schedule, ZeRO, recomputation, micro-batch) of CONFIG's "
    "model on a cluster and prints the best, with the `train --set` overrides that run it "
    "(docs/PLANNER.md).",
    {{"--cluster", "CLUSTER.yaml", "", "the cluster (configs/clusters/, or bench calibrate's)", "",
      true},
     {"--world", "N", "", "devices to plan for", "the whole cluster"},
     {"--top", "K", "10", "rows of the table"},
     {"--explain", "K", "",
      "break plan K of the table (1 = the best) down: time per stage and term, memory per "
      "stage and field, communication per collective"},
     {"--quantized", "true|false", "false", "also consider ZeRO++'s lossy qwZ and qgZ"},
     {"--layout", "search|given", "search", "given: price the config's own layout only"},
     {"--json", "true|false", "false",
      "one JSON line per plan instead of the table; with --explain K, plan K's line holds "
      "\"explain\": parameters, memory per stage, rank 0's and the job's bytes per step"},
     {"--set", "key.path=value", "", "override a key of CONFIG", "", false, true},
     {"--out", "FRAGMENT.yaml", "", "write the best plan's keys as a YAML fragment to merge"}},
    "",
    1,
    1};

double mib(double bytes) { return bytes / 1048576.0; }

std::string link_text(const std::map<LinkClass, std::uint64_t>& bytes, LinkClass link) {
  const auto at = bytes.find(link);
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f",
                at == bytes.end() ? 0.0 : mib(static_cast<double>(at->second)));
  return text;
}

void print_table(const std::vector<PlanCost>& plans, int top) {
  std::printf("%3s  %-52s %21s %10s %11s %6s %6s %19s\n", "#", "layout", "memory/device MiB",
              "step ms", "tokens/s", "MFU", "bubble", "comm MiB intra/inter");
  for (int i = 0; i < top && i < static_cast<int>(plans.size()); ++i) {
    const PlanCost& p = plans[static_cast<std::size_t>(i)];
    std::map<LinkClass, std::uint64_t> by_link;
    for (LinkClass link : {LinkClass::intra_node, LinkClass::inter_node})
      by_link[link] = p.time.rank0_comm.link_bytes(link);
    char memory[48];
    std::snprintf(memory, sizeof(memory), "%.1f / %.0f%s", mib(static_cast<double>(p.memory_bytes)),
                  mib(static_cast<double>(p.limit_bytes)), p.fits() ? "" : " !");
    std::printf("%3d  %-52s %21s %10.2f %11.0f %5.1f%% %5.1f%% %9s/%-9s\n", i + 1,
                p.layout.name().c_str(), memory, p.time.seconds * 1e3, p.time.tokens_per_s,
                100 * p.time.mfu, 100 * p.time.bubble_fraction,
                link_text(by_link, LinkClass::intra_node).c_str(),
                link_text(by_link, LinkClass::inter_node).c_str());
  }
}

JsonLine link_bytes_json(const std::map<LinkClass, std::uint64_t>& by_link) {
  JsonLine links;
  for (const auto& [link, bytes] : by_link) links.add(link_class_name(link), bytes);
  return links;
}

// Plan `p`'s figures under the names a training step logs them with (metrics.jsonl's
// memory_bytes, comm_bytes, comm_bytes_by_axis, comm_bytes_job), so that a benchmark reads the
// formula from here instead of re-deriving it, and a run's line compares with it key by key.
JsonLine explain_json(const PlanCost& p, const ClusterSpec& cluster, int world_size) {
  const ModelConfig& m = p.config.model;
  const GptShape shape = gpt_shape_of(m);
  std::vector<JsonLine> stages;
  for (const MemoryAccount& account : p.stage_memory) stages.push_back(memory_json(account));
  const CommPrediction& rank0 = p.time.rank0_comm;
  JsonLine by_kind, by_axis;
  for (const auto& [kind, by_link] : rank0.bytes_by_kind())
    by_kind.add(kind, link_bytes_json(by_link));
  by_axis.add("tp", rank0.group_bytes(CommGroup::tp))
      .add("pp", rank0.group_bytes(CommGroup::pp))
      .add("dp", rank0.group_bytes(CommGroup::dp));
  const MeshShape mesh = resolve_mesh(p.config, world_size);
  if (mesh.ep > 1)  // the trainer reports these two under expert parallelism only
    by_axis.add("ep", rank0.group_bytes(CommGroup::ep))
        .add("expert_dp", rank0.group_bytes(CommGroup::expert_dp));
  if (mesh.cp > 1)  // and these two under context parallelism only
    by_axis.add("cp", rank0.group_bytes(CommGroup::cp))
        .add("dp_cp", rank0.group_bytes(CommGroup::dp_cp));
  // Every rank's bytes, as the trainer sums them over the job. Under DiLoCo these are the inner
  // steps of the first worker's mesh times the workers: every worker's mesh sits alike on the
  // nodes (whole nodes each, or all in one: config validation), so it sends the same.
  const std::size_t row_bytes = activation_element_bytes(cluster, p.config.precision.compute);
  std::map<LinkClass, std::uint64_t> job = {{LinkClass::intra_node, 0}, {LinkClass::inter_node, 0}};
  const std::uint64_t workers = p.config.diloco.enabled ? p.config.diloco.workers : 1;
  for (int stage = 0; stage < mesh.pp; ++stage)
    for (int tp_rank = 0; tp_rank < mesh.tp; ++tp_rank)
      for (int dp_rank = 0; dp_rank < mesh.dp; ++dp_rank) {
        const CommPrediction rank =
            predict_communication(p.config, world_size, stage, tp_rank, dp_rank, row_bytes);
        for (LinkClass link : {LinkClass::intra_node, LinkClass::inter_node})
          job[link] += workers * rank.link_bytes(link);
      }
  std::vector<double> pipeline_ms, idle_ms;
  for (double seconds : p.time.stage_pipeline) pipeline_ms.push_back(seconds * 1e3);
  for (double seconds : p.time.stage_idle) idle_ms.push_back(seconds * 1e3);
  return JsonLine()
      .add("parameters", ParameterLayout::for_gpt(shape).total())
      .add("memory_bytes_by_stage", stages)
      .add("comm_bytes", by_kind)
      .add("comm_bytes_by_axis", by_axis)
      .add("comm_bytes_job", link_bytes_json(job))
      .add("pipeline_ms_by_stage", pipeline_ms, "%.3f")
      .add("pipeline_idle_ms_by_stage", idle_ms, "%.3f")
      .add("bubble_fraction", p.time.bubble_fraction, "%.4f");
}

// Lines for plans 1 to `top`, and for plan `explained` (1-based; 0: none) with its explanation
// (after the others when it is beyond them).
void print_json(const std::vector<PlanCost>& plans, int top, int explained,
                const ClusterSpec& cluster, int world_size) {
  for (int i = 0; i < static_cast<int>(plans.size()); ++i) {
    if (i >= top && i + 1 != explained) continue;
    const PlanCost& p = plans[static_cast<std::size_t>(i)];
    std::string overrides;  // space-separated key=value (no value holds a space)
    for (const std::string& set : p.layout.overrides())
      overrides += (overrides.empty() ? "" : " ") + set;
    JsonLine by_link;
    for (LinkClass link : {LinkClass::intra_node, LinkClass::inter_node})
      by_link.add(link_class_name(link), p.time.rank0_comm.link_bytes(link));
    JsonLine line;
    line.add("rank", i + 1)
        .add("layout", p.layout.name())
        .add("step_ms", p.time.seconds * 1e3, "%.4f")
        .add("tokens_per_s", p.time.tokens_per_s, "%.1f")
        .add("mfu", p.time.mfu, "%.5f")
        .add("bubble", p.time.bubble_fraction, "%.5f")
        .add("memory_bytes", p.memory_bytes)
        .add("rank0_memory_bytes", total_bytes(p.stage_memory.front()))
        .add("limit_bytes", p.limit_bytes)
        .add("fits", p.fits())
        .add("rank0_comm_bytes", by_link)
        .add("overrides", overrides);
    if (i + 1 == explained) line.add("explain", explain_json(p, cluster, world_size));
    std::printf("%s\n", line.str().c_str());
  }
}

void explain(const PlanCost& p, const ClusterSpec& cluster) {
  std::printf("\nplan: %s\n", p.layout.name().c_str());
  std::printf("step %.3f ms = pipeline %.3f ms (bubble %.1f%%) + end of step + update",
              p.time.seconds * 1e3, p.time.pipeline * 1e3, 100 * p.time.bubble_fraction);
  if (cluster.cores_per_node > 0)
    std::printf("; %d ranks share %d cores, %d thread(s) each",
                p.layout.tp * p.layout.pp * p.layout.dp, cluster.cores_per_node * cluster.nodes,
                p.time.threads);
  std::printf("\n\ntime per stage, ms (fwd/bwd per micro-batch; the rest per step)\n");
  std::printf("%5s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n", "stage", "fwd comp", "bwd comp",
              "fwd", "bwd", "pass comm", "gathers", "end comm", "optimizer", "update");
  for (std::size_t s = 0; s < p.time.stages.size(); ++s) {
    const StageTime& t = p.time.stages[s];
    std::printf("%5zu %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n", s,
                t.forward_compute * 1e3, t.backward_compute * 1e3, t.forward * 1e3,
                t.backward * 1e3, t.pass_comm * 1e3, t.gather_exposed * 1e3, t.step_comm * 1e3,
                t.optimizer * 1e3, t.update_comm * 1e3);
  }
  std::printf("\nmemory per stage, MiB (limit %.0f)\n", mib(static_cast<double>(p.limit_bytes)));
  std::printf("%5s %9s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "stage", "master", "compute",
              "grads", "optimizer", "activ.", "gathered", "buckets", "secondary", "comm", "total");
  for (std::size_t s = 0; s < p.stage_memory.size(); ++s) {
    const MemoryAccount& m = p.stage_memory[s];
    std::printf("%5zu %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f\n", s,
                mib(m.master_weights), mib(m.compute_weights), mib(m.gradients),
                mib(m.optimizer_state), mib(m.activations), mib(m.gathered_weights),
                mib(m.gradient_buckets), mib(m.secondary_weights), mib(m.communication),
                mib(total_bytes(m)));
  }
  std::printf("\ncommunication of rank 0 per step\n%-36s %-15s %-6s %-10s %8s %12s %10s\n", "what",
              "kind", "group", "phase", "calls", "MiB", "ms");
  const char* phases[] = {"forward", "backward", "pipeline", "gather", "step", "update"};
  for (const CommEvent& e : p.time.rank0_comm.events)
    std::printf("%-36s %-15s %-6s %-10s %8d %12.3f %10.3f\n", e.what.c_str(), e.kind.c_str(),
                comm_group_name(e.group), phases[static_cast<int>(e.phase)], e.repeats,
                mib(static_cast<double>(e.total_bytes()) * e.repeats),
                event_seconds(e, cluster) * e.repeats * 1e3);
}

void write_fragment(const std::string& path, const PlanLayout& layout) {
  // key.path=value overrides as a nested map (yaml-cpp's operator[] on a copied node would not
  // attach new children to the root, so the tree is built from the root down each time).
  YAML::Node root(YAML::NodeType::Map);
  for (const std::string& set : layout.overrides()) {
    const std::size_t eq = set.find('=');
    std::vector<std::string> keys;
    std::istringstream path_in(set.substr(0, eq));
    for (std::string key; std::getline(path_in, key, '.');) keys.push_back(key);
    const YAML::Node value = YAML::Load(set.substr(eq + 1));
    if (keys.size() == 1) root[keys[0]] = value;
    if (keys.size() == 2) root[keys[0]][keys[1]] = value;
    if (keys.size() == 3) root[keys[0]][keys[1]][keys[2]] = value;
    STRATA_CHECK(keys.size() <= 3, "a layout key deeper than three levels: ", set);
  }
  YAML::Emitter out;
  out << root;
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file(temporary);
    file << "# The layout `plan` chose: merge into a config, or pass as --set overrides.\n"
         << out.c_str() << "\n";
    if (!file) fail("cannot write ", temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) fail("cannot replace ", path);
}

int run(int argc, char** argv) {
  // Not in kCommand (it plans nothing): for whoever edits docs/ARCHITECTURE.md §3, whose key
  // tables plan_config_reference_test compares with these rows.
  if (argc == 2 && std::string_view(argv[1]) == "--config-reference") {
    std::fputs(config_reference_tables().c_str(), stdout);
    return 0;
  }
  const ToolArgs args(argc, argv, 1, kCommand);
  const std::string config_path = args.positionals().at(0);
  const Config config = load_config(config_path, args.all("--set"));
  const ClusterSpec cluster = load_cluster(args.get("--cluster"));
  const int world =
      args.has("--world") ? static_cast<int>(args.integer("--world")) : cluster.devices();
  const int top = static_cast<int>(args.integer("--top"));
  if (top < 1) fail("--top must be positive");
  const std::string quantized = args.get("--quantized");
  if (quantized != "true" && quantized != "false") fail("--quantized must be true or false");
  SearchOptions options;
  options.quantized = quantized == "true";

  const std::string layout = args.get("--layout"), json = args.get("--json");
  if (layout != "search" && layout != "given") fail("--layout must be search or given");
  if (json != "true" && json != "false") fail("--json must be true or false");
  const long long explained = args.has("--explain") ? args.integer("--explain") : 0;
  if (layout == "given") {
    const std::vector<PlanCost> given = {cost_of(config, cluster, world)};
    if (args.has("--explain") && explained != 1)
      fail("--explain ", explained, " is not a plan of the table (1 to 1)");
    if (json == "true") {
      print_json(given, 1, static_cast<int>(explained), cluster, world);
    } else {
      print_table(given, 1);
      explain(given.front(), cluster);
    }
    return 0;
  }
  const std::vector<PlanCost> plans = search_layouts(config, cluster, world, options);
  if (args.has("--explain") && (explained < 1 || explained > static_cast<long long>(plans.size())))
    fail("--explain ", explained, " is not a plan of the table (1 to ", plans.size(), ")");
  if (json == "true") {
    print_json(plans, top, static_cast<int>(explained), cluster, world);
    return 0;
  }
  int fitting = 0;
  for (const PlanCost& p : plans) fitting += p.fits();
  std::printf(
      "plan for %s on %d devices of cluster '%s' (%s, %s each): %zu layouts priced, %d fit\n\n",
      config_path.c_str(), world, cluster.name.c_str(), cluster.device.name.c_str(),
      gib_text(cluster.device.memory_gib * 1024.0 * 1048576.0).c_str(), plans.size(), fitting);
  print_table(plans, top);
  const PlanCost best = best_of(plans, cluster, world);  // the error if none fits
  std::printf("\nbest: %s\n  train %s", best.layout.name().c_str(), config_path.c_str());
  for (const std::string& set : best.layout.overrides()) std::printf(" --set %s", set.c_str());
  std::printf("\n");
  if (explained > 0) explain(plans[static_cast<std::size_t>(explained - 1)], cluster);
  if (const auto verdict = diloco_verdict(config, cluster, world)) {
    std::printf("\nDiLoCo: %s\n  synchronous: %s, %.0f tokens/s; a worker: %s, %.3f s per step\n",
                verdict->summary.c_str(), verdict->sync_layout.c_str(), verdict->sync_tokens_per_s,
                verdict->worker_layout.c_str(), verdict->worker_step_seconds);
    for (const DilocoOption& o : verdict->options)
      std::printf("  H = %4d: %.0f tokens/s\n", o.inner_steps, o.tokens_per_s);
  }
  if (args.has("--out")) {
    write_fragment(args.get("--out"), best.layout);
    std::printf("wrote %s\n", args.get("--out").c_str());
  }
  return 0;
}

}  // namespace
}  // namespace strata

int main(int argc, char** argv) {
  try {
    return strata::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
