"""Averaging recipes (issue 32): which checkpoints are folded (a metric's top or bottom N as the
trainers record it, step ranges, the latest N) and schedule weights (sma, wma, wma-step, ema:D, WSM),
each against Python computing the same from the same files (selection_ref.py) and, for the folds,
against the weighted sum Python computes of the checkpoints Python chose.

Fixtures: trainer_runs/ (scripts/fixtures/trainer_runs.py): a real transformers Trainer run, a real
Lightning ModelCheckpoint run, timm's CheckpointSaver and plain state dicts with a metrics table.
"""
import glob
import json
import os
import tempfile
import unittest

import torch
from safetensors.torch import load_file, save_file

import selection_ref
from common import TempDirTest, fixture, swavg
from peak_rss import peak_rss
from reference import load_output

RUNS = fixture("trainer_runs")


def run_dir(run):
    return os.path.join(RUNS, run)


def dry_run(*args):
    p = swavg("average", *args, "-o", os.path.join(tempfile.gettempdir(), "swavg-plan-never-written.pt"),
              "--dry-run", "--json")
    return json.loads(p.stdout)


def chosen(plan):
    return [i["path"] for i in plan["inputs"]]


class MetricSelectionTest(unittest.TestCase):
    """--top/--bottom N --metric NAME over real runs equal Python's sorted() selection of the same."""

    def check(self, entries, args, **rank):
        want = [e["path"] for e in selection_ref.select(entries, **rank)]
        plan = dry_run(*args, *[e["path"] for e in entries])
        self.assertEqual(chosen(plan), want)
        kept = [c["path"] for c in plan["selection"]["candidates"] if c["kept"]]
        self.assertEqual(kept, want)
        for c, e in zip(plan["selection"]["candidates"], entries):
            self.assertEqual(c["path"], e["path"])
            self.assertEqual(c["metric"], e["metric"])
        return plan

    def test_hugging_face_trainer_eval_loss(self):
        entries = selection_ref.entries_from_reference(run_dir("hf"))
        for n in range(1, len(entries) + 1):
            for side in ("top", "bottom"):
                with self.subTest(n=n, side=side):
                    plan = self.check(entries, ["--" + side, n, "--metric", "eval_loss"], **{side: n})
        self.assertEqual(plan["selection"]["candidates"][0]["metric_source"],
                         "trainer_state.json log_history 'eval_loss'")

    def test_lightning_model_checkpoint_score_and_name(self):
        entries = selection_ref.entries_from_reference(run_dir("lightning"), include=r"^epoch=")
        for n in (1, 3):
            with self.subTest(n=n):
                plan = self.check(entries, ["--bottom", n, "--metric", "val_loss"], bottom=n)
        self.assertEqual(plan["selection"]["candidates"][0]["metric_source"], "ModelCheckpoint current_score")
        self.assertEqual(plan["selection"]["candidates"][0]["step_source"], "entry 'global_step'")

    def test_timm_metric_with_ties(self):
        entries = selection_ref.entries_from_reference(run_dir("timm"), include=r"^checkpoint-\d")
        for n in range(1, len(entries) + 1):
            for side in ("top", "bottom"):
                for name in ("metric", "top1"):  # top1: the args.eval_metric timm's `metric` holds
                    with self.subTest(n=n, side=side, name=name):
                        self.check(entries, ["--" + side, n, "--metric", name], **{side: n})

    def test_trainer_metric_without_its_eval_prefix(self):
        """--metric loss is eval_loss, as Trainer reads metric_for_best_model, not the training loss."""
        entries = selection_ref.entries_from_reference(run_dir("hf"))
        plan = self.check(entries, ["--bottom", 2, "--metric", "loss"], bottom=2)
        self.assertEqual(plan["selection"]["candidates"][0]["metric_source"], "trainer_state.json log_history 'eval_loss'")

    def test_metric_file_csv_and_json(self):
        base = selection_ref.entries_from_reference(run_dir("plain"))
        values = {100: 0.5, 200: 0.75, 300: 0.625, 400: 0.75, 500: 0.6875}  # metrics.csv, as written
        entries = [dict(e, metric=values[e["step"]]) for e in base]
        for table in ("metrics.csv", "metrics.json"):
            for n in (1, 2, 4):
                with self.subTest(table=table, n=n):
                    self.check(entries, ["--top", n, "--metric", "val_acc", "--metric-file",
                                         os.path.join(run_dir("plain"), table)], top=n)


class StepSelectionTest(unittest.TestCase):
    """--sort step, --from-step/--to-step, --every and --last against Python."""

    def test_ranges_every_and_last(self):
        entries = selection_ref.sort_by_step(selection_ref.entries_from_reference(run_dir("hf")))
        paths = [e["path"] for e in reversed(entries)]  # given backwards: --sort step restores the order
        cases = [dict(from_step=4), dict(to_step=6), dict(from_step=4, to_step=8), dict(from_step=6, to_step=6),
                 dict(from_step=3, to_step=9, every=2), dict(from_step=4, last=2), dict(last=1),
                 dict(from_step=2, bottom=2)]
        for case in cases:
            with self.subTest(**case):
                args = ["--sort", "step"]
                for k, v in case.items():
                    args += ["--" + k.replace("_", "-"), v]
                if "bottom" in case:
                    args += ["--metric", "eval_loss"]
                want = [e["path"] for e in selection_ref.select(entries, **case)]
                self.assertEqual(chosen(dry_run(*args, *paths)), want)

    def test_a_checkpoint_without_a_step_is_named(self):
        paths = sorted(glob.glob(os.path.join(run_dir("timm"), "*.pth.tar")))
        with self.assertRaises(ValueError):
            selection_ref.sort_by_step(selection_ref.entries_from_reference(run_dir("timm")))
        p = swavg("average", "--sort", "step", *paths, "-o", "/tmp/swavg-x.pt", "--dry-run", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("last.pth.tar: no step found", p.stderr)
        self.assertIn("--sort step needs each checkpoint's step", p.stderr)


class SelectionRunTest(TempDirTest):
    """A real fold of a selection: the same bytes as folding the chosen files by hand, and the choice in
    the report and the output's resume record."""

    def test_bottom_two_equal_the_two_by_hand(self):
        entries = selection_ref.entries_from_reference(run_dir("hf"))
        want = [e["path"] for e in selection_ref.select(entries, bottom=2)]
        out, by_hand = self.path("best.safetensors"), self.path("hand.safetensors")
        p = swavg("average", "--bottom", "2", "--metric", "eval_loss", *[e["path"] for e in entries], "-o", out,
                  "--json")
        swavg("average", *want, "-o", by_hand)
        a, b = load_file(out), load_file(by_hand)
        self.assertEqual(list(a), list(b))
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)
        report = json.loads(p.stdout)
        self.assertEqual(report["inputs"], want)
        self.assertEqual(report["selection"]["bottom"], 2)
        self.assertEqual(report["selection"]["metric"], "eval_loss")
        self.assertEqual(len(report["selection"]["candidates"]), len(entries))
        with open(out, "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        record = json.loads(header["__metadata__"]["swavg"])
        self.assertEqual([c["path"] for c in record["selection"]["candidates"] if c["kept"]], want)

    def test_missing_metric_names_the_checkpoint_and_writes_nothing(self):
        out = self.path("x.pt")
        p = swavg("average", "--top", "2", "--metric", "eval_accuracy",
                  *sorted(glob.glob(os.path.join(run_dir("hf"), "checkpoint-*"))), "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("swavg: error:", p.stderr)
        self.assertIn("checkpoint-2: no metric 'eval_accuracy'", p.stderr)
        self.assertIn("'eval_loss'", p.stderr)  # what was logged there instead
        self.assertFalse(os.path.exists(out))


class RecipeWeightsTest(TempDirTest):
    """--weights RECIPE: the weights shown and recorded equal the formula computed in Python, and the
    fold equals Python's weighted sum of the checkpoints."""

    RECIPES = ["sma", "wma", "wma-step", "ema:0.5", "ema:0.9", "ema:1", "ema:0", "wsm:linear", "wsm:cosine",
               "wsm:1-sqrt", "wsm:0.9,0.6,0.6,0.1", "0.5,1,1,2,3"]

    def setUp(self):
        super().setUp()
        self.entries = selection_ref.entries_from_reference(run_dir("plain"))
        self.paths = [e["path"] for e in self.entries]
        self.steps = [e["step"] for e in self.entries]
        self.sds = [torch.load(p) for p in self.paths]

    def test_weights_shown_recorded_and_folded(self):
        for recipe in self.RECIPES:
            with self.subTest(recipe=recipe):
                want = selection_ref.recipe_weights(recipe, self.steps)
                plan = dry_run("--weights", recipe, *self.paths)
                for got, w in zip(plan["weights"], want):
                    self.assertAlmostEqual(got, w, delta=1e-15)
                out = self.path("w.pt")
                p = swavg("average", "--weights", recipe, *self.paths, "-o", out, "--force", "--json")
                report = json.loads(p.stdout)
                self.assertEqual(report["weights"], plan["weights"])
                if "," not in recipe or recipe.startswith("wsm:"):
                    self.assertEqual(report["weights_recipe"], recipe)
                    self.assertIn("--weights %s: " % recipe, p.stderr)
                got = load_output(out)
                ref = selection_ref.weighted_average(self.sds, want)
                for k, v in ref.items():
                    torch.testing.assert_close(got[k].double(), v, rtol=2e-7, atol=2e-7, msg=k)

    def test_the_text_plan_shows_the_choice_and_the_weights(self):
        p = swavg("average", "--weights", "wma", "--from-step", "200", *self.paths, "-o", self.path("w.pt"),
                  "--dry-run")
        want = selection_ref.recipe_weights("wma", self.steps[1:])
        self.assertIn("Weights (wma) (normalised, in fold order):", p.stdout)
        for i, w in enumerate(want):
            self.assertIn("  %4d  %s\n" % (i + 1, repr(w)), p.stdout)
        self.assertIn("Chosen from 5 candidates:", p.stdout)
        self.assertIn("dropped by --from-step  step 100 (name)", p.stdout)
        self.assertIn("kept  step 500 (name)", p.stdout)
        self.assertFalse(os.path.exists(self.path("w.pt")))

    def test_recipe_after_a_selection_uses_the_kept_steps(self):
        plan = dry_run("--weights", "wma-step", "--from-step", "300", *self.paths)
        self.assertEqual(chosen(plan), self.paths[2:])
        want = selection_ref.recipe_weights("wma-step", self.steps[2:])
        for got, w in zip(plan["weights"], want):
            self.assertAlmostEqual(got, w, delta=1e-15)

    def test_bad_recipes(self):
        cases = [
            ("wsm:0.5,0.2", "2 decay values for 5 checkpoints"),
            ("wsm:0.5,0.6,0.2,0.1", "value 2 is 0.6"),
            ("wsm:1.0000000000000002,0.6,0.2,0.1", "value 1 is"),
            ("ema:1.5", "the decay must be in [0, 1]"),
            ("ema:x", "expected ema:DECAY with a number"),
            ("wmaa", "expected a number, got 'wmaa'"),
            ("1,x", "expected a number, got 'x' in '1,x'"),
        ]
        out = self.path("x.pt")
        for recipe, needle in cases:
            with self.subTest(recipe=recipe):
                p = swavg("average", "--weights", recipe, *self.paths, "-o", out, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("swavg: error: --weights", p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertFalse(os.path.exists(out))


class ManyOutputsTest(TempDirTest):
    """Several outputs from one read (--decay or --weights repeated, -o with a pattern): each output
    byte-identical to its own run, the report and the dry run naming every output."""

    def setUp(self):
        super().setUp()
        self.cnn = sorted(glob.glob(fixture("runs/cnn/ckpt_*.pt")))

    def assert_same_files(self, a, b):
        with open(a, "rb") as f, open(b, "rb") as g:
            self.assertTrue(f.read() == g.read(), "%s and %s differ" % (a, b))

    def test_ema_decays_equal_separate_runs(self):
        decays = ["0.9", "0.99", "0.999", "1", "0"]
        for ext in (".pt", ".safetensors"):
            with self.subTest(ext=ext):
                args = [x for d in decays for x in ("--decay", d)]
                extra = ["--drop-objects"] if ext == ".safetensors" else []
                p = swavg("ema", *args, *self.cnn, *extra, "-o", self.path("ema-{decay}" + ext), "--json")
                report = json.loads(p.stdout)
                self.assertEqual([o["output"] for o in report["outputs"]], [self.path("ema-%s%s" % (d, ext))
                                                                            for d in decays])
                self.assertEqual([o["decay"] for o in report["outputs"]], [float(d) for d in decays])
                for d in decays:
                    one = self.path("one-%s%s" % (d, ext))
                    swavg("ema", "--decay", d, *self.cnn, *extra, "-o", one)
                    self.assert_same_files(self.path("ema-%s%s" % (d, ext)), one)

    def test_weightings_equal_separate_runs(self):
        weights = ["sma", "wma", "wsm:cosine", "ema:0.5", "1,0,0,2,3,1"]
        args = [x for w in weights for x in ("--weights", w)]
        plan = json.loads(swavg("average", *args, *self.cnn, "-o", self.path("avg-{weights}.pt"), "--dry-run",
                                "--json").stdout)
        self.assertEqual([o["path"] for o in plan["outputs"]], [self.path("avg-%s.pt" % w) for w in weights])
        steps = [None] * len(self.cnn)
        for o, w in zip(plan["outputs"], weights):
            for got, want in zip(o["weights"], selection_ref.recipe_weights(w, steps)):
                self.assertAlmostEqual(got, want, delta=1e-15)
        self.assertEqual(os.listdir(self.tmp), [])  # the dry run wrote nothing
        swavg("average", *args, *self.cnn, "-o", self.path("avg-{weights}.pt"))
        for w in weights:
            one = self.path("one-%s.pt" % w)
            swavg("average", "--weights", w, *self.cnn, "-o", one)
            self.assert_same_files(self.path("avg-%s.pt" % w), one)

    def test_after_a_selection_and_resumable(self):
        hf = sorted(glob.glob(os.path.join(run_dir("hf"), "checkpoint-*")))
        swavg("ema", "--decay", "0.5", "--decay", "0.75", "--bottom", "3", "--metric", "eval_loss", *hf, "-o",
              self.path("e-{decay}.safetensors"))
        for d in ("0.5", "0.75"):
            one = self.path("one-%s.safetensors" % d)
            swavg("ema", "--decay", d, "--bottom", "3", "--metric", "eval_loss", *hf, "-o", one)
            self.assert_same_files(self.path("e-%s.safetensors" % d), one)
        # each output is an EMA of its own decay: --resume continues it as its own run's would
        more = self.path("more.safetensors")
        swavg("ema", "--decay", "0.75", "--resume", self.path("e-0.75.safetensors"), hf[-1], "-o", more)
        again = self.path("again.safetensors")
        swavg("ema", "--decay", "0.75", "--resume", self.path("one-0.75.safetensors"), hf[-1], "-o", again)
        a, b = load_file(more), load_file(again)  # the records name their resumed files: compare tensors
        self.assertEqual(list(a), list(b))
        for k in a:
            self.assertTrue(torch.equal(a[k], b[k]), k)

    def test_memory_grows_by_a_slice_per_output_not_by_the_model(self):
        """8 outputs of a 64 MiB tensor: each adds its accumulator slice (2^18 float32, 1 MiB) and its
        write buffer (4 MiB), never a copy of the tensor; the dry run counts the same."""
        inputs = []
        for i in range(3):
            p = self.path("big_%d.safetensors" % i)
            save_file({"w": torch.randn(16 << 20, generator=torch.Generator().manual_seed(i))}, p)
            inputs.append(p)
        decays = ["0.5", "0.6", "0.7", "0.8", "0.9", "0.95", "0.99", "0.999"]
        one = peak_rss("ema", "--decay", "0.5", *inputs, "-o", self.path("one.safetensors"))
        args = [x for d in decays for x in ("--decay", d)] + inputs + ["-o", self.path("m-{decay}.safetensors")]
        many = peak_rss("ema", *args)
        per_output = (1 << 20) + (4 << 20)
        grown = many - one
        self.assertLess(grown, (len(decays) - 1) * per_output * 1.25 + (8 << 20),
                        "8 outputs grew the peak by %d bytes over 1" % grown)
        plan = json.loads(swavg("ema", *args, "--force", "--dry-run", "--json").stdout)
        one_plan = json.loads(swavg("ema", "--decay", "0.5", *inputs, "-o", self.path("one.safetensors"),
                                    "--force", "--dry-run", "--json").stdout)
        self.assertEqual(plan["peak_memory"]["bytes"] - one_plan["peak_memory"]["bytes"],
                         (len(decays) - 1) * per_output)

    def test_refusals(self):
        out = self.path("x-{decay}.pt")
        cases = [
            (["--decay", "0.9", "--decay", "0.99", "-o", self.path("x.pt")], "-o must contain {decay}"),
            (["--decay", "0.9", "--decay", "0.99", "-o", self.path("d-{decay}") + "/"], "-o DIR/ writes one folder"),
            (["--decay", "0.9", "--decay", "0.99", "--resume", self.cnn[0], "-o", out], "--resume continues one"),
            (["--decay", "0.9", "--decay", "0.9", "-o", out], "name the same file"),
            (["--decay", "0.9", "--decay", "1.5", "-o", out], "--decay: expected a value in [0, 1], got 1.5"),
            (["--decay", "0.9", "--decay", "0.99", "--update-bn", "--model", fixture("runs/cnn/net.ts"), "--data",
              fixture("bn/data.npy"), "-o", out], "--update-bn recomputes one average's statistics"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                p = swavg("ema", *args, *self.cnn, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(needle, p.stderr)
                self.assertEqual(os.listdir(self.tmp), [])


if __name__ == "__main__":
    unittest.main()
