"""scripts/bench, the benchmark harness: its metrics.jsonl readers, the tables it computes from
runs, and its reader of `plan --explain --json true` (against the real plan binary, whose
figures must be those the harness hands the benchmarks). Fast: no training run.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH=scripts and STRATA_BIN_DIR set."""
import json
import os
import tempfile
import unittest

from bench import (attention, context, diloco, explain, fp8, layouts, metrics, planner, precision,
                   schedules, swarm, zero)

BIN_DIR = os.environ.get("STRATA_BIN_DIR", "build/bin")


def write_lines(folder, lines):
    path = os.path.join(folder, "metrics.jsonl")
    with open(path, "w") as file:
        file.writelines(json.dumps(line) + "\n" for line in lines)
    return path


class Metrics(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.lines = metrics.read(write_lines(self.folder.name, [
            {"step": 1, "loss": 4.0, "step_ms": 900.0},
            {"step": 2, "loss": 3.5, "step_ms": 100.0},
            {"step": 2, "val_loss": 3.75},
            {"step": 3, "loss": 3.0, "step_ms": 300.0},
            {"step": 4, "loss": 2.5, "step_ms": 200.0},
            {"step": 4, "val_loss": 2.75},
            {"activation_mib_by_stage": [1.5, 2.5], "peak_rss_mib": 12.0}]))

    def tearDown(self):
        self.folder.cleanup()

    def test_selections(self):
        self.assertEqual([line["step"] for line in metrics.training(self.lines)], [1, 2, 3, 4])
        self.assertEqual(metrics.final_val_loss(self.lines), 2.75)
        self.assertEqual(metrics.last_with(self.lines, "activation_mib_by_stage")["peak_rss_mib"],
                         12.0)
        with self.assertRaises(KeyError):
            metrics.last_with(self.lines, "no_such_key")

    def test_median_step_skips_warm_up(self):
        steps = metrics.training(self.lines)
        self.assertEqual(metrics.median_step_ms(steps), 200.0)  # 100, 300, 200: not 900
        self.assertEqual(metrics.median_step_ms(steps, skip=2), 250.0)
        self.assertEqual(metrics.median_step_ms(steps[:1]), 900.0)  # nothing after warm-up

    def test_bytes_and_state(self):
        self.assertEqual(metrics.bytes_by_kind(
            {"all_gather": {"intra_node": 3, "inter_node": 4}, "all_reduce": {"intra_node": 8}}),
            {"all_gather": 7, "all_reduce": 8})
        self.assertEqual(metrics.model_state(
            {"master_weights": 1, "compute_weights": 2, "gradients": 4, "optimizer_state": 8,
             "secondary_weights": 16, "gathered_weights": 32, "activations": 64}), 31)


class Reports(unittest.TestCase):
    def test_layouts_marks_a_mismatch(self):
        last = {"comm_bytes_by_axis": {"tp": 2**20, "pp": 0, "dp": 3 * 2**20},
                "comm_seconds_by_axis": {"tp": 0.5, "pp": 0, "dp": 0.25}, "step_ms": 1500.0}
        rows = layouts.comm_rows((2, 2, 1, "1f1b", True), last,
                                 {"tp": 2**20, "pp": 0, "dp": 2**20})
        self.assertEqual(len(rows), 2)  # tp and dp; pp is of size 1
        self.assertEqual(rows[0], " 2  2  1  true |   tp        1.000        1.000   yes   0.500"
                                  " |   1.50")
        self.assertIn("3.000        1.000    NO", rows[1])

    def test_zero_compares_every_kind(self):
        measured = {"all_reduce": {"intra_node": 12}, "reduce_scatter": {"intra_node": 5,
                                                                         "inter_node": 5}}
        rows, match = zero.comm_rows(2, measured, {"all_reduce": {"intra_node": 12},
                                                   "reduce_scatter": {"inter_node": 10}})
        self.assertTrue(match)
        self.assertIn("reduce_scatter:           10 |           10  (intra_node 5, inter_node 5)",
                      rows[1])
        _, match = zero.comm_rows(2, measured, {"all_reduce": {"intra_node": 12}})
        self.assertFalse(match)
        self.assertEqual(zero.memory_mismatches(
            {"master_weights": 4, "gradients": 4, "optimizer_state": 8},
            {"master_weights": 4, "gradients": 2, "optimizer_state": 8}), ["gradients"])

    def test_diloco_row_against_the_baseline(self):
        baseline = [{"step": 1, "loss": 3.0, "comm_bytes_job": {"intra_node": 0,
                                                                  "inter_node": 4_000_000}},
                    {"step": 1, "val_loss": 2.0}]
        run = [{"step": 1, "loss": 3.0, "comm_bytes_job": {"intra_node": 0, "inter_node": 0}},
               {"outer_sync_s": 0.5, "outer_hidden_s": 0.25,
                "outer_comm_bytes_job": {"inter_worker": 1_000_000}},
               {"step": 1, "val_loss": 2.1}]
        self.assertEqual(diloco.row("h5", "diloco.inner_steps=5 diloco.overlap=true", run,
                                    baseline),
                         "| h5 | inner_steps=5 overlap=true (0.25 of 0.50 s of syncs hidden) |"
                         " 2.1000 | +5.00% | 1.0 MB | 4× |")
        self.assertEqual(diloco.row("baseline", "", baseline, None),
                         "| baseline | data-parallel, batch × workers, the config's | 2.0000 | |"
                         " 4.0 MB | |")

    def test_fp8_rows_compare_with_bf16(self):
        def run(val, steps):
            return [{"step": i, "loss": 3.0, "step_ms": ms} for i, ms in enumerate(steps)] + [
                {"step": len(steps), "val_loss": val}]
        text, reference = fp8.row("bf16", run(4.0, [90, 100, 100, 100]), None)
        self.assertEqual(text, "| bf16 | 4.0000 | 1.0000 | 100 | 1.00× |")
        text, _ = fp8.row("fp8 delayed", run(4.02, [300, 150, 150, 150]), reference)
        self.assertEqual(text, "| fp8 delayed | 4.0200 | 1.0050 | 150 | 1.50× |")

    def test_precision_keeps_the_fastest_round(self):
        results = [{"compute": c, "recompute": r, "tokens_per_s": t, "step_ms": 1000.0 / t}
                   for c, r, t in [("fp32", "none", 10), ("fp32", "none", 20),
                                   ("bf16", "full", 5)]]
        best = precision.best_runs(results)
        self.assertEqual(best[("fp32", "none")]["tokens_per_s"], 20)
        self.assertEqual(len(best), 2)

    def test_attention_keeps_each_sides_fastest_round(self):
        def line(t, forward, backward, scratch):
            return {"seq_len": t, "forward_ms": forward, "backward_ms": backward,
                    "forward_scratch_bytes": 1 << 20, "backward_scratch_bytes": scratch}
        rows = [("build", line(1024, 10.0, 30.0, 1 << 20)),
                ("build", line(1024, 9.0, 21.0, 1 << 20)),
                ("baseline", line(1024, 10.0, 50.0, 16 << 20)),
                ("baseline", line(1024, 12.0, 60.0, 16 << 20))]
        last = attention.table(rows).splitlines()[-1]
        self.assertEqual(last, "| 1024 | 9.0 | 21.0 | 2.00x | 1.00 MiB | 1.00 MiB | 10.0 | 50.0 |"
                               " 16.00 MiB |")

    def test_planner_takes_the_median_round(self):
        def run(layout, measured, choice=False):
            predicted = 100.0 if layout == "a" else 150.0
            return {"layout": layout, "choice": choice, "measured_ms": measured,
                    "predicted_ms": predicted, "measured_account": 2**20,
                    "predicted_account": 2**20 if layout == "a" else 2**21,
                    "rss_mib": 10.0 if layout == "a" else 20.0}
        out = planner.report([run("a", 100.0), run("b", 200.0), run("b", 120.0, True),
                              run("a", 80.0), run("b", 120.0), run("b", 200.0, True)])
        # Rows per (layout, choice), in first-seen order, each the median of its rounds.
        self.assertEqual(out[2], "| a | 100.0 | 90.0 (100, 80) | +11.1% | 1.00 | 1.00 | 10.0 |")
        self.assertEqual(out[3], "| b | 150.0 | 160.0 (200, 120) | -6.2% | 2.00 | 1.00 | 20.0 |")
        self.assertTrue(out[4].startswith("| b (planner's choice) | 150.0 | 160.0 (120, 200) |"))
        self.assertIn("account equal to the prediction in 1/3 layouts", out[-2])
        self.assertIn("fastest measured 90.0 ms (a): +77.8%", out[-1])

    def test_schedules_rows_pair_measured_and_predicted(self):
        lines = [{"step": 1, "loss": 4.0, "step_ms": 90.0}, {"step": 2, "loss": 3.0, "step_ms": 30.0},
                 {"step": 3, "loss": 2.0, "step_ms": 50.0},
                 {"activation_mib_by_stage": [1.5, 0.5], "pipeline_ms_by_stage": [20.0, 21.0],
                  "pipeline_idle_ms_by_stage": [5.0, 6.0]}]
        shared = {"bubble_fraction": 0.25, "pipeline_ms_by_stage": [19.0, 19.5],
                  "pipeline_idle_ms_by_stage": [4.0, 4.5],
                  "memory_bytes_by_stage": [{"activations": 3 * 2**19}, {"activations": 2**19}]}
        rows = schedules.run_rows("zb-h1", lines, shared, {"bubble_fraction": 0.1})
        self.assertEqual(rows[0], "zb-h1: step 40.0 ms; planner (shared cores) bubble 25.0%,"
                         " dedicated devices 10.0%")
        self.assertIn("measured [5.0, 6.0]  timed simulation [4.0, 4.5]", rows[2])
        self.assertIn("measured [1.50, 0.50]  planner [1.50, 0.50]", rows[3])
        slow = [{"step": s, "loss": 1.0, "step_ms": 80.0} for s in (1, 2, 3)]
        self.assertIs(schedules.fastest([slow, lines]), lines)
        self.assertEqual(schedules.dedicated("a: 1\ncores_per_node: 2\nwaiting_share: 0.1\nb: 2\n"),
                         "a: 1\nb: 2\n")


    def test_context_row_marks_what_differs_from_the_planner(self):
        lines = [{"step": 1, "loss": 4.0, "step_ms": 90.0, "activation_mib": 1.5,
                  "comm_bytes_by_axis": {"cp": 2**20}},
                 {"step": 2, "loss": 3.0, "step_ms": 40.0, "activation_mib": 1.5,
                  "comm_bytes_by_axis": {"cp": 2**20}}]
        priced = {"memory_bytes_by_stage": [{"activations": 3 * 2**19}],
                  "comm_bytes_by_axis": {"cp": 2**20}}
        self.assertEqual(context.run_row(1024, 1, 2, "ring", lines, priced),
                         "| 1024 | cp 2 ring | 40 | 51200 | 1.50 (exact) | 1.00 (exact) |")
        self.assertIn("| dp 2 |", context.run_row(1024, 2, 1, "ring", lines, priced))
        priced = {"memory_bytes_by_stage": [{"activations": 2**20}], "comm_bytes_by_axis": {}}
        self.assertEqual(context.run_row(1024, 1, 2, "ring", lines, priced),
                         "| 1024 | cp 2 ring | 40 | 51200 | 1.50 (differs) | 1.00 (differs (0)) |")

    def test_swarm_row_sums_the_drivers_bytes(self):
        # Two drivers: the first's steps and val_loss, the bytes of both per step.
        first = [{"step": 1, "loss": 5.0, "step_ms": 900.0, "boundary_bytes": 2**20},
                 {"step": 2, "loss": 4.0, "step_ms": 400.0, "boundary_bytes": 2 * 2**20},
                 {"step": 2, "val_loss": 4.5}]
        second = [{"step": 2, "loss": 4.1, "step_ms": 410.0, "boundary_bytes": 2**20}]
        row = swarm.report("s", {"a": first, "b": second}, 2.0, 32, 128, killed=2)
        self.assertEqual(row["val_loss"], 4.5)
        self.assertAlmostEqual(row["tokens_per_s"], 32 * 128 / 0.4)
        self.assertAlmostEqual(row["wall_tokens_per_s"], 2 * 32 * 128 / 2.0)
        self.assertEqual(row["boundary_mib_per_step"], 1.5)  # (2 + 1) MiB over 2 steps
        self.assertEqual(row["killed"], 2)


class Explain(unittest.TestCase):
    def test_parse_takes_the_explained_line(self):
        text = '{"rank": 1, "layout": "x"}\n\n{"rank": 2, "explain": {"parameters": 7}}\n'
        self.assertEqual(explain.parse(text)["explain"], {"parameters": 7})
        with self.assertRaises(ValueError):
            explain.parse('{"rank": 1}\n')

    def test_plan_reports_the_layout_figures(self):
        with tempfile.TemporaryDirectory() as folder:
            config = os.path.join(folder, "tiny.yaml")
            with open(config, "w") as file:
                file.write("run: {name: tiny, dir: runs}\n"
                           "model: {n_layer: 2, n_head: 2, d_model: 32, seq_len: 16,"
                           " vocab_size: 128}\n"
                           "data: {train: data/train}\n"
                           "train: {steps: 2, global_batch: 4, micro_batch: 1}\n"
                           "parallel: {dp: 4, zero: {stage: 1}}\n")
            cluster = explain.write_cpu_cluster(os.path.join(folder, "cluster.yaml"), 4)

            def figures(per_node):
                return explain.explain(os.path.join(BIN_DIR, "plan"), config, cluster, 4,
                                       [f"parallel.gpus_per_node={per_node}"])
            one_node, two_nodes = figures(4), figures(2)
            with self.assertRaises(RuntimeError):
                explain.explain(os.path.join(BIN_DIR, "plan"), config, cluster, 3, [])
        # wte 128 × 32, wpe 16 × 32, 2 blocks of 12·32² + 13·32, lnf 2·32.
        total = 128 * 32 + 16 * 32 + 2 * (12 * 32 * 32 + 13 * 32) + 2 * 32
        self.assertEqual(one_node["parameters"], total)
        # ZeRO 1 over 4 ranks: fp32 master weights and gradients whole, AdamW's two moments over
        # a quarter of the buffer, padded to 4 · 64 elements.
        padded = -(-total // 256) * 256
        memory = one_node["memory_bytes_by_stage"][0]
        self.assertEqual(len(one_node["memory_bytes_by_stage"]), 1)
        self.assertEqual(memory["master_weights"], 4 * padded)
        self.assertEqual(memory["optimizer_state"], 8 * padded // 4)
        # Every rank of a ring sends what rank 0 sends: on one node all of it stays inside; on two
        # nodes of 2, half of the ring's hops cross.
        rank0 = sum(metrics.bytes_by_kind(one_node["comm_bytes"]).values())
        self.assertEqual(one_node["comm_bytes_by_axis"]["dp"], rank0)
        self.assertEqual(one_node["comm_bytes_job"], {"intra_node": 4 * rank0, "inter_node": 0})
        self.assertEqual(two_nodes["comm_bytes_job"],
                         {"intra_node": 2 * rank0, "inter_node": 2 * rank0})


if __name__ == "__main__":
    unittest.main()
