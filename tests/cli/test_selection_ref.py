"""Checks of the Python reference itself (selection_ref.py) against hand-worked cases, so a wrong
reference cannot make a wrong swavg pass; and, where the fixtures are built, of the trainer runs'
reference.json files against what the libraries wrote (ties, steps, Lightning's rounded names)."""
import math
import os
import unittest

import torch

import selection_ref as ref

FIXTURES = os.environ.get("SWAVG_FIXTURES", "fixtures")
TRAINER_RUNS = os.path.join(FIXTURES, "trainer_runs")


def entries(metrics, steps=None):
    steps = steps or [None] * len(metrics)
    return [{"path": "c%d" % i, "step": s, "metric": m} for i, (m, s) in enumerate(zip(metrics, steps))]


def paths(selected):
    return [e["path"] for e in selected]


class RecipeTest(unittest.TestCase):
    def close(self, got, want, tol=1e-15):
        self.assertEqual(len(got), len(want))
        for g, w in zip(got, want):
            self.assertAlmostEqual(g, w, delta=tol)

    def test_sma(self):
        self.close(ref.recipe_weights("sma", [None] * 4), [0.25] * 4)

    def test_wma_four(self):
        self.close(ref.recipe_weights("wma", [None] * 4), [0.1, 0.2, 0.3, 0.4])

    def test_wma_step(self):
        self.close(ref.recipe_weights("wma-step", [100, 200, 300, 400]), [0.1, 0.2, 0.3, 0.4])
        self.close(ref.recipe_weights("wma-step", [0, 1, 3]), [0.0, 0.25, 0.75])
        with self.assertRaises(ValueError):
            ref.recipe_weights("wma-step", [1, None])

    def test_ema_is_a_running_lerp(self):
        # The weights of `swavg ema --decay D`: copy the first, then avg.lerp_(x, 1 - D), in float64
        # over one-hot vectors, so avg ends as the weight of each checkpoint.
        for d in (0.0, 0.5, 0.9, 0.999, 1.0):
            for n in (1, 2, 5, 9):
                basis = torch.eye(n, dtype=torch.float64)
                avg = basis[0].clone()
                for i in range(1, n):
                    avg.lerp_(basis[i], 1 - d)
                self.close(ref.recipe_weights("ema:%r" % d, [None] * n), avg.tolist(), 1e-15)
        self.close(ref.raw_weights("ema:0.5", [None] * 3), [0.25, 0.25, 0.5])

    def test_wsm_linear_is_equal_weights(self):
        for n in range(1, 9):
            self.close(ref.recipe_weights("wsm:linear", [None] * n), [1.0 / n] * n)

    def test_wsm_cosine_three(self):
        # k = 2: w_1 = (1 + cos(pi/3))/2 = 0.75, w_2 = (1 + cos(2pi/3))/2 = 0.25
        self.close(ref.recipe_weights("wsm:cosine", [None] * 3), [0.25, 0.5, 0.25])

    def test_wsm_one_minus_sqrt_four(self):
        w1, w2, w3 = 0.5, 1 - math.sqrt(0.5), 1 - math.sqrt(0.75)
        self.close(ref.recipe_weights("wsm:1-sqrt", [None] * 4), [0.5, w1 - w2, w2 - w3, w3], 1e-15)

    def test_wsm_explicit(self):
        self.close(ref.recipe_weights("wsm:0.5,0.25", [None] * 3), [0.5, 0.25, 0.25])
        self.close(ref.recipe_weights("wsm:1,0", [None] * 3), [0.0, 1.0, 0.0])
        for bad, n in (("wsm:0.5", 3), ("wsm:0.25,0.5", 3), ("wsm:1.5,0.5", 3), ("wsm:0.5,-0.1", 3)):
            with self.assertRaises(ValueError, msg=bad):
                ref.recipe_weights(bad, [None] * n)

    def test_one_checkpoint(self):
        for recipe in ("sma", "wma", "wma-step", "ema:0.9", "wsm:linear", "wsm:cosine", "wsm:1-sqrt", "2"):
            self.assertEqual(ref.recipe_weights(recipe, [7]), [1.0], recipe)

    def test_plain_list(self):
        self.close(ref.recipe_weights("1,2,1", [None] * 3), [0.25, 0.5, 0.25])
        for bad in ("1,2", "1,-1,1", "0,0,0", "1,nan,1"):
            with self.assertRaises(ValueError, msg=bad):
                ref.recipe_weights(bad, [None] * 3)

    def test_every_recipe_sums_to_one(self):
        steps = [3, 5, 8, 13, 21, 34]
        for recipe in ("sma", "wma", "wma-step", "ema:0.7", "wsm:linear", "wsm:cosine", "wsm:1-sqrt",
                       "wsm:0.9,0.8,0.5,0.5,0.1"):
            w = ref.recipe_weights(recipe, steps)
            self.assertAlmostEqual(math.fsum(w), 1.0, delta=1e-15, msg=recipe)
            self.assertTrue(all(v >= 0 for v in w), recipe)


class SelectTest(unittest.TestCase):
    def test_top_tie_keeps_the_earlier(self):
        e = entries([1.0, 3.0, 2.0, 3.0])
        self.assertEqual(paths(ref.select(e, top=1)), ["c1"])
        self.assertEqual(paths(ref.select(e, top=2)), ["c1", "c3"])
        self.assertEqual(paths(ref.select(e, top=3)), ["c1", "c2", "c3"])

    def test_bottom_tie_keeps_the_earlier(self):
        e = entries([2.0, 1.0, 5.0, 1.0, 2.0])
        self.assertEqual(paths(ref.select(e, bottom=1)), ["c1"])
        self.assertEqual(paths(ref.select(e, bottom=3)), ["c0", "c1", "c3"])

    def test_fold_order_not_metric_order(self):
        e = entries([5.0, 1.0, 4.0, 9.0])
        self.assertEqual(paths(ref.select(e, top=2)), ["c0", "c3"])
        self.assertEqual(paths(ref.select(e, bottom=2)), ["c1", "c2"])
        self.assertEqual(paths(ref.select(e, top=10)), ["c0", "c1", "c2", "c3"])

    def test_step_range_is_inclusive(self):
        e = entries([0.0] * 5, steps=[100, 200, 300, 400, 500])
        self.assertEqual(paths(ref.select(e, from_step=200, to_step=400)), ["c1", "c2", "c3"])
        self.assertEqual(paths(ref.select(e, from_step=450)), ["c4"])
        self.assertEqual(paths(ref.select(e, to_step=100)), ["c0"])

    def test_every_keeps_the_kth(self):
        e = entries([0.0] * 7)
        self.assertEqual(paths(ref.select(e, every=3)), ["c2", "c5"])
        self.assertEqual(paths(ref.select(e, every=1)), paths(e))

    def test_pipeline_order(self):
        # range -> every -> last -> top: steps 10..80, range 20..70 keeps c1..c6, every 2 keeps
        # c2 c4 c6, last 2 keeps c4 c6, top 1 keeps c4 (its metric is higher).
        e = entries([9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0], steps=[10, 20, 30, 40, 50, 60, 70, 80])
        self.assertEqual(paths(ref.select(e, from_step=20, to_step=70, every=2, last=2, top=1)), ["c4"])
        self.assertEqual(paths(ref.select(e, from_step=20, to_step=70, every=2, last=2, bottom=1)), ["c6"])

    def test_missing_metric_or_step_names_it(self):
        e = entries([1.0, None, 2.0], steps=[1, 2, None])
        with self.assertRaisesRegex(ValueError, "c1"):
            ref.select(e, top=1)
        with self.assertRaisesRegex(ValueError, "c2"):
            ref.select(e, from_step=1)
        self.assertEqual(paths(ref.select(e, last=2)), ["c1", "c2"])

    def test_sort_by_step_is_stable(self):
        e = entries([0.0] * 4, steps=[30, 10, 30, 20])
        self.assertEqual(paths(ref.sort_by_step(e)), ["c1", "c3", "c0", "c2"])

    def test_natural_key(self):
        names = ["ckpt_10.pt", "ckpt_2.pt", "ckpt_1.pt", "last.ckpt"]
        self.assertEqual(sorted(names, key=ref.natural_key), ["ckpt_1.pt", "ckpt_2.pt", "ckpt_10.pt", "last.ckpt"])


class WeightedAverageTest(unittest.TestCase):
    def test_float64_sum(self):
        a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(4)}
        b = {"w": torch.tensor([3.0, 0.1]), "n": torch.tensor(8)}
        got = ref.weighted_average([a, b], [0.25, 0.75])
        self.assertEqual(got["w"].dtype, torch.float64)
        self.assertEqual(got["w"].tolist(), [0.25 * 1.0 + 0.75 * 3.0, 0.25 * 2.0 + 0.75 * float(torch.tensor(0.1))])
        self.assertEqual(got["n"].item(), 7.0)


@unittest.skipUnless(os.path.isdir(TRAINER_RUNS), "no trainer_runs fixtures (make_fixtures.py)")
class FixtureReferenceTest(unittest.TestCase):
    def run_dir(self, run):
        return os.path.join(TRAINER_RUNS, run)

    def test_timm_ties(self):
        e = ref.entries_from_reference(self.run_dir("timm"), include=r"^checkpoint-\d")
        self.assertEqual([x["metric"] for x in e], [50.0, 62.5, 75.0, 62.5, 81.25, 75.0])
        self.assertEqual([os.path.basename(x["path"]) for x in ref.select(e, top=2)],
                         ["checkpoint-2.pth.tar", "checkpoint-4.pth.tar"])
        self.assertEqual([os.path.basename(x["path"]) for x in ref.select(e, bottom=2)],
                         ["checkpoint-0.pth.tar", "checkpoint-1.pth.tar"])

    def test_timm_metric_is_in_the_file(self):
        for x in ref.entries_from_reference(self.run_dir("timm")):
            ckpt = torch.load(x["path"], map_location="cpu", weights_only=False)
            self.assertEqual(ckpt["metric"], x["metric"])

    def test_lightning_name_rounds_current_score(self):
        e = ref.entries_from_reference(self.run_dir("lightning"))
        named = ref.entries_from_reference(self.run_dir("lightning"), value="value_from_name")
        self.assertGreaterEqual(len(e), 6)
        for x, y in zip(e, named):
            if y["metric"] is not None:
                self.assertEqual(float("%.4f" % x["metric"]), y["metric"])

    def test_hf_steps_and_metric(self):
        e = ref.entries_from_reference(self.run_dir("hf"))
        self.assertEqual([x["step"] for x in e], [2, 4, 6, 8, 10])
        self.assertTrue(all(isinstance(x["metric"], float) for x in e))

    def test_plain_tie(self):
        e = ref.entries_from_reference(self.run_dir("plain"))
        self.assertEqual([os.path.basename(x["path"]) for x in ref.select(e, top=1)], ["step_200.pt"])
        self.assertEqual([os.path.basename(x["path"]) for x in ref.select(e, top=2)], ["step_200.pt", "step_400.pt"])


if __name__ == "__main__":
    unittest.main()
