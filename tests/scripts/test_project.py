#!/usr/bin/env python3
"""The arithmetic of scripts/project.py against hand-computed values: the collective costs, the
schedule meshnn's auto choice picks, the weight bytes per device and a whole projection of a fixed
synthetic measurement. No MPI, no files beyond a temporary record and profile."""
import contextlib
import csv
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import project  # noqa: E402

ALPHA, BETA = 2e-6, 1e-9  # 2 us, 1 GB/s
LINK = project.Link("test", [(0.0, ALPHA, BETA)], "test")
TINYLLAMA4 = project.replace(project.SHAPES["tinyllama"], layers=4)


class CollectiveCosts(unittest.TestCase):
    def test_schedule_choice_follows_meshnn_auto(self):
        self.assertEqual(project.all_reduce_algorithm(1, 1 << 20), "none")
        self.assertEqual(project.all_reduce_algorithm(2, 8 << 20), "direct")
        self.assertEqual(project.all_reduce_algorithm(2, (8 << 20) + 1), "ring")
        self.assertEqual(project.all_reduce_algorithm(4, 64 << 10), "direct")
        self.assertEqual(project.all_reduce_algorithm(4, (64 << 10) + 1), "bidirectional_ring")

    def test_direct_all_reduce(self):
        # 4 members, 8 KiB: alpha + 3 * 8192 * beta.
        self.assertAlmostEqual(project.all_reduce_seconds(4, 8192, LINK), 2e-6 + 3 * 8192e-9)

    def test_ring_all_reduce_on_two(self):
        # 16 MiB on 2: ring, 2 steps of S/2: 2 * (alpha + 8 MiB * beta).
        s = 16 << 20
        self.assertAlmostEqual(project.all_reduce_seconds(2, s, LINK), 2 * (ALPHA + s / 2 * BETA))

    def test_bidirectional_ring_all_reduce(self):
        # 1 MiB on 8: 2 * 7 steps of S / 16.
        s = 1 << 20
        self.assertAlmostEqual(project.all_reduce_seconds(8, s, LINK), 14 * (ALPHA + s / 16 * BETA))

    def test_all_gather(self):
        self.assertAlmostEqual(project.all_gather_seconds(4, 28, LINK), ALPHA + 3 * 28 * BETA)
        block = 1 << 20
        self.assertAlmostEqual(project.all_gather_seconds(4, block, LINK), 3 * (ALPHA + block / 2 * BETA))

    def test_piecewise_link_picks_the_segment(self):
        link = project.Link("pw", [(0.0, 1e-6, 1e-9), (4096.0, 5e-6, 1e-10)], "test")
        self.assertAlmostEqual(link.seconds(1000), 1e-6 + 1000e-9)
        self.assertAlmostEqual(link.seconds(8192), 5e-6 + 8192e-10)


class WeightsPerDevice(unittest.TestCase):
    def test_one_device_matches_the_job(self):
        # TinyLlama, 4 layers, on one device: per layer 2048 x (2048 + 256 + 256) + 2048 x 2048 +
        # 2048 x 11264 + 5632 x 2048, plus the LM head 2048 x 32000; bfloat8_b is 1088 B per 1024.
        p = project.placement(TINYLLAMA4, 1, 1, False)
        elems = 4 * (2048 * 2560 + 2048 * 2048 + 2048 * 11264 + 5632 * 2048) + 2048 * 32000
        self.assertEqual(elems, 241696768)
        # meshnn-llm's record gives matmul_weight_bytes 256802816 for this model.
        self.assertAlmostEqual(project.matmul_weight_bytes(TINYLLAMA4, p, "bfloat8_b"), 256802816)

    def test_tp_pads_kv_heads_to_tiles(self):
        # 8 devices, 4 KV heads: each KV head on 2 devices; q 4 heads x 64 = 256 columns, k and v one
        # head of 64 each; intermediate 704 -> 704; vocab 4000.
        p = project.placement(TINYLLAMA4, 1, 8, False)
        self.assertEqual((p.q_heads, p.kv_heads, p.local_inter, p.local_vocab), (4, 1, 704, 4000))
        w = project.matmul_weights(TINYLLAMA4, p)
        self.assertEqual(w["wqkv"], (2048, 256 + 64 + 64, 4))
        self.assertEqual(w["w_gate_up"], (2048, 1408, 4))
        self.assertEqual(w["lm_head"], (2048, 4000, 1))

    def test_2d_splits_hidden_over_rows(self):
        s = project.SHAPES["llama3-70b"]  # 4x8: hidden 8192 / 4, heads 64 / 8, vocab 128256 / 8
        p = project.placement(s, 4, 8, True)
        self.assertEqual((p.hidden_chunk, p.q_heads, p.kv_heads, p.local_vocab), (2048, 8, 1, 16032))
        w = project.matmul_weights(s, p)
        self.assertEqual(w["wo"], (8 * 128, 2048, 80))
        self.assertEqual(w["lm_head"], (2048, 16032, 1))

    def test_heads_that_do_not_split(self):
        self.assertIsNone(project.placement(TINYLLAMA4, 1, 3, False))


class Projection(unittest.TestCase):
    """A synthetic 1-rank measurement projected onto itself and onto 2 devices."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        d = self.dir.name
        self.record = os.path.join(d, "r.json")
        self.profile = os.path.join(d, "p.csv")
        # 10 ms/step of matmuls over 256802816 B -> 25.68 GB/s; prefill 64 tokens in 0.1 s, 0.08 s matmul.
        with open(self.record, "w") as f:
            json.dump({"ranks": 1, "mesh": "1x1", "mode": "tp", "weight_dtype": "bfloat8_b", "requests": 1,
                       "max_batch": 32, "layers": 4, "hidden": 2048, "prefill_s": 0.1, "prefill_tokens_per_s": 640.0,
                       "prefill_matmul_s": 0.08, "mean_ttft_s": 0.1, "decode_ms_per_step": 11.0,
                       "decode_matmul_ms_per_step": 10.0, "decode_comm_ms_per_step": 0.0,
                       "matmul_weight_bytes": 256802816.0, "generated_tokens": 16}, f)
        rows = [("phase", "decode step", 15, 165.0), ("phase", "prefill pass", 1, 100.0), ("op", "matmul", 272, 230.0),
                ("op", "rms_norm", 144, 2.0), ("op", "swiglu", 64, 8.0)]
        with open(self.profile, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["rank", "kind", "name", "calls", "total_ms", "mean_us", "share", "gflops", "gbytes_per_s",
                        "busbw_gb_s", "wait_ms"])
            for kind, name, calls, total in rows:
                w.writerow([0, kind, name, calls, total, 0, 0, 0, 0, 0, 0])
        self.m, _ = project.load_measured(self.record, self.profile, None, None)

    def tearDown(self):
        self.dir.cleanup()

    def test_rates_from_the_record(self):
        self.assertAlmostEqual(self.m.stream_gb_s, 25.6802816)
        self.assertEqual((self.m.prompt, self.m.new_tokens, self.m.users), (64, 16, 1))
        # No trace: the 1 ms of non-matmul decode time split 2:8 between rms_norm and swiglu.
        self.assertAlmostEqual(self.m.decode_ops_ms["rms_norm"], 0.2)
        self.assertAlmostEqual(self.m.decode_ops_ms["swiglu"], 0.8)

    def test_projects_itself(self):
        r = project.project(self.m, self.m.shape, "tp", 1, 1, 64, 16, LINK)
        self.assertAlmostEqual(r["decode_ms"], 11.0, places=6)
        self.assertAlmostEqual(r["decode_comm_ms"], 0.0)

    def test_two_devices(self):
        r = project.project(self.m, self.m.shape, "tp", 2, 1, 64, 16, LINK)
        p2 = project.placement(self.m.shape, 1, 2, False)
        matmul = project.matmul_weight_bytes(self.m.shape, p2, "bfloat8_b") / 25.6802816e9
        # rms_norm is replicated (hidden whole), swiglu halves with the intermediate.
        ops = 0.2e-3 + 0.8e-3 / 2
        # 8 all_reduces of 2048 float32 (direct on 2) and the sampler's all_gather of 7 words.
        comm = 8 * (ALPHA + 8192 * BETA) + ALPHA + 28 * BETA
        self.assertAlmostEqual(r["decode_ms"], 1e3 * (matmul + ops + comm), places=6)
        self.assertAlmostEqual(r["decode_comm_ms"], 1e3 * comm, places=9)

    def test_time_sharing_scales_compute_only(self):
        alone = project.project(self.m, self.m.shape, "tp", 4, 1, 64, 16, LINK)
        shared = project.project(self.m, self.m.shape, "tp", 4, 1, 64, 16, LINK, cores=2)
        self.assertAlmostEqual(shared["decode_compute_ms"], 2 * alone["decode_compute_ms"])
        self.assertAlmostEqual(shared["decode_comm_ms"], alone["decode_comm_ms"])

    def test_node_bandwidth_caps_the_ranks_streaming_at_once(self):
        # 30 GB/s for 2 cores: 2 ranks stream at 15 GB/s each (below the measured 25.68); 4 ranks
        # on 2 cores also at 15 (two stream at a time), then time-share; 1 rank keeps its own rate.
        p2 = project.placement(self.m.shape, 1, 2, False)
        bytes2 = project.matmul_weight_bytes(self.m.shape, p2, "bfloat8_b")
        r2 = project.project(self.m, self.m.shape, "tp", 2, 1, 64, 16, LINK, cores=2, node_gb_s=30.0)
        self.assertAlmostEqual(r2["decode_matmul_ms"], 1e3 * bytes2 / 15e9, places=6)
        plain4 = project.project(self.m, self.m.shape, "tp", 4, 1, 64, 16, LINK, cores=2)
        r4 = project.project(self.m, self.m.shape, "tp", 4, 1, 64, 16, LINK, cores=2, node_gb_s=30.0)
        self.assertAlmostEqual(r4["decode_matmul_ms"], plain4["decode_matmul_ms"] * 25.6802816 / 15, places=6)
        r1 = project.project(self.m, self.m.shape, "tp", 1, 1, 64, 16, LINK, cores=2, node_gb_s=30.0)
        self.assertAlmostEqual(r1["decode_ms"], 11.0, places=6)

    def test_compare_prices_each_run_at_its_own_bandwidth_and_sets_unsteady_runs_aside(self):
        # A 2-rank run measured exactly as projected at 30 GB/s for the node: no error. The same
        # run 40% slower but with the bandwidth moving 30 -> 60 GB/s across it: shown, not counted.
        r2 = project.project(self.m, self.m.shape, "tp", 2, 1, 64, 16, LINK, cores=2, node_gb_s=30.0)
        with open(self.record) as f:
            rec = json.load(f)
        rec.update({"ranks": 2, "mesh": "1x2", "decode_ms_per_step": r2["decode_ms"], "mean_ttft_s": r2["ttft_ms"] / 1e3,
                    "node_read_GBps": 30.0, "node_read_GBps_before": 29.0, "node_read_GBps_after": 31.0})
        steady = os.path.join(self.dir.name, "steady.json")
        with open(steady, "w") as f:
            json.dump(rec, f)
        rec.update({"decode_ms_per_step": 1.4 * r2["decode_ms"], "node_read_GBps_before": 30.0,
                    "node_read_GBps_after": 60.0})
        moved = os.path.join(self.dir.name, "moved.json")
        with open(moved, "w") as f:
            json.dump(rec, f)
        self.assertFalse(project.bandwidth_moved(json.load(open(steady))))
        self.assertTrue(project.bandwidth_moved(rec))
        args = project.argparse.Namespace(cores=2, node_bandwidth=60.0, device_rate_scale=1.0)
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
            self.assertAlmostEqual(project.compare(self.m, [steady], LINK, args), 0.0, places=9)
            self.assertAlmostEqual(project.compare(self.m, [steady, moved], LINK, args), 0.0, places=9)
            rec["node_read_GBps_after"] = 31.0  # now steady: its 40% counts
            with open(moved, "w") as f:
                json.dump(rec, f)
            self.assertAlmostEqual(project.compare(self.m, [steady, moved], LINK, args), 1 - 1 / 1.4, places=6)

    def test_missing_file_is_a_clear_error(self):
        with self.assertRaises(SystemExit) as e:
            project.load_measured(os.path.join(self.dir.name, "none.json"), self.profile, None, None)
        self.assertIn("cannot read the run record", str(e.exception))


if __name__ == "__main__":
    unittest.main()
