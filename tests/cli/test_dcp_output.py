"""--format dcp: swavg's Distributed Checkpoint folders, read back by torch 2.14 itself.

References: torch's own dcp_to_torch_save of the input fixtures (scripts/fixtures/dcp.py), then the
average in Python (reference.swa_fold); the outputs are read with torch.distributed.checkpoint.load
in one process and into DTensor state dicts over 2 and 4 gloo processes on localhost, and with
dcp_to_torch_save. The chunk layout is compared with the first input's .metadata as torch reads it.
"""
import filecmp
import io
import json
import os
import pickle
import shutil
import socket
import subprocess
import unittest
import warnings

import torch
import torch.distributed.checkpoint as dcp_api

from common import SWAVG, TempDirTest, same_bits, swavg
from reference import ema_decays, ema_fold, load_output, swa_fold
from test_dcp import consolidated, dcp, flat, fold

# The fixtures' placements (scripts/fixtures/dcp.py): "model." tensors as DTensors on a 1-D mesh.
PLACEMENT = {"embed.weight": "s0", "proj.weight": "s1", "proj.bias": "s0", "norm.weight": "r", "head.weight": "s0"}


def reference_average(names):
    refs = [flat(consolidated(n)[1]["model"]) for n in names]
    return {k: fold(swa_fold, [r[k] for r in refs]) for k, v in refs[0].items() if isinstance(v, torch.Tensor)}


def metadata(folder):
    with open(os.path.join(folder, ".metadata"), "rb") as f:
        return pickle.load(f)  # written by torch's dcp.save or by swavg in this test


def layout(folder, prefix="model."):
    """{fqn: [(offsets, sizes, file)]} as torch reads the folder's .metadata."""
    md = metadata(folder)
    files = {(k.fqn, tuple(k.offset)): v.relative_path for k, v in md.storage_data.items() if k.offset is not None}
    out = {}
    for fqn, tm in md.state_dict_metadata.items():
        if fqn.startswith(prefix) and hasattr(tm, "chunks"):
            out[fqn] = [(tuple(c.offsets), tuple(c.sizes), files[(fqn, tuple(c.offsets))]) for c in tm.chunks]
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _load_ranks(rank, world, port, folder, want_path, failures):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        kinds = {"s0": [Shard(0)], "s1": [Shard(1)], "r": [Replicate()]}
        want = torch.load(want_path, weights_only=True)
        state = {"model": {}}
        for k, v in want.items():
            empty = torch.zeros_like(v)
            state["model"][k] = distribute_tensor(empty, mesh, kinds[PLACEMENT[k]]) if k in PLACEMENT else empty
        dcp_api.load(state, checkpoint_id=folder)
        for k, v in want.items():
            got = state["model"][k]
            got = got.full_tensor() if hasattr(got, "full_tensor") else got
            if not same_bits(got, v):
                with open("%s.rank%d" % (failures, rank), "a") as f:
                    f.write("%s differs on rank %d of %d\n" % (k, rank, world))
    finally:
        dist.destroy_process_group()


class DcpOutputTest(TempDirTest):
    def assert_same(self, got, want):
        self.assertEqual(sorted(got), sorted(want))
        for k in want:
            with self.subTest(tensor=k):
                self.assertTrue(same_bits(got[k], want[k]), "%s: not bit-exact" % k)

    def load_one_process(self, folder, want, prefix="model"):
        state = {prefix: {k: torch.zeros_like(v) for k, v in want.items()}} if prefix else \
            {k: torch.zeros_like(v) for k, v in want.items()}
        dcp_api.load(state, checkpoint_id=folder)
        return state[prefix] if prefix else state

    def consolidate(self, folder):
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        out = folder.rstrip("/") + ".consolidated.pt"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp_to_torch_save(folder, out)
        return torch.load(out, weights_only=True)

    def average(self, names, out, *extra):
        # In the order given: the output is chunked like the first input, which each test chooses.
        swavg("average", *[dcp(n) for n in names], "--sort", "none", "--format", "dcp", "-o", out, *extra)
        return out

    def test_one_process_load_equals_torch_reference(self):
        for names in (["rank4_0", "rank4_1"], ["run1_0", "run1_1", "run1_2"], ["rank2_0", "rank4_1", "run1_2"]):
            with self.subTest(names=names):
                out = self.average(names, self.path("-".join(names) + "/"))
                want = reference_average(names)
                self.assert_same(self.load_one_process(out, want), want)
                self.assert_same(flat(self.consolidate(out)["model"]), want)
                self.assertEqual(layout(out), layout(dcp(names[0])))  # chunked like the first input

    def test_ema(self):
        names = ["rank4_0", "rank2_1"]
        out = self.path("ema/")
        swavg("ema", "--decay", "0.9", *[dcp(n) for n in names], "--sort", "none", "--format", "dcp", "-o", out)
        refs = [flat(consolidated(n)[1]["model"]) for n in names]
        want = {k: fold(ema_fold, [r[k] for r in refs], ema_decays(2, 0.9)) for k in refs[0]}
        self.assert_same(self.load_one_process(out, want), want)
        self.assertEqual(layout(out), layout(dcp(names[0])))

    def test_chunks_in_the_first_inputs_rank_files(self):
        out = self.average(["rank4_0", "rank4_1"], self.path("avg/"))
        self.assertEqual(sorted(f for f in os.listdir(out) if f.endswith(".distcp")),
                         ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"])
        got = layout(out)
        self.assertEqual(got["model.proj.weight"][1], ((0, 3), (6, 3), "__1_0.distcp"))  # Shard(1)
        self.assertEqual(got["model.proj.bias"][3], ((3,), (0,), "__3_0.distcp"))  # an empty chunk
        md = metadata(out)
        self.assertEqual(md.version, "1.0.0")
        self.assertIsNone(md.storage_meta.load_id)
        self.assertEqual(md.planner_data["model.embed.weight"], ("model", "embed.weight"))
        ends = {}
        for k, info in md.storage_data.items():  # each chunk is a torch.save of the chunk's tensor
            with open(os.path.join(out, info.relative_path), "rb") as f:
                f.seek(info.offset)
                t = torch.load(io.BytesIO(f.read(info.length)), weights_only=True)
            chunk = [c for c in md.state_dict_metadata[k.fqn].chunks if tuple(c.offsets) == tuple(k.offset)][0]
            self.assertEqual(tuple(t.shape), tuple(chunk.sizes), k.fqn)
            ends[info.relative_path] = max(ends.get(info.relative_path, 0), info.offset + info.length)
        for name, end in ends.items():  # the archives fill each rank file exactly
            self.assertEqual(os.path.getsize(os.path.join(out, name)), end, name)

    def test_dtensor_load_over_2_and_4_ranks(self):
        import torch.multiprocessing as mp
        names = ["rank4_0", "rank4_1"]
        out = self.average(names, self.path("avg/"))
        want_path = self.path("want.pt")
        torch.save(reference_average(names), want_path)
        for world in (2, 4):
            with self.subTest(world=world):
                failures = self.path("failures%d" % world)
                # forked, not spawned: the ranks need not import torch again
                mp.start_processes(_load_ranks, args=(world, _free_port(), out, want_path, failures), nprocs=world,
                                   join=True, start_method="fork")
                found = [f for f in os.listdir(self.tmp) if f.startswith("failures%d" % world)]
                self.assertEqual(found, [], "".join(open(self.path(f)).read() for f in found))

    def test_non_dcp_first_input_is_one_chunk_per_tensor(self):
        src = self.path("in.pt")
        swavg("convert", dcp("rank4_0"), "-o", src)
        out = self.path("conv/")
        swavg("convert", src, "--format", "dcp", "-o", out)
        want = load_output(src)
        self.assert_same(self.load_one_process(out, want, prefix=None), want)
        self.assertEqual(sorted(os.listdir(out)), [".metadata", "__0_0.distcp"])
        for fqn, chunks in layout(out, prefix="").items():
            self.assertEqual(chunks, [((0,) * len(want[fqn].shape), tuple(want[fqn].shape), "__0_0.distcp")], fqn)
        # and swavg reads its own DCP output back
        back = self.path("back.pt")
        swavg("convert", out, "-o", back)
        self.assert_same(load_output(back), want)

    def test_swavg_reads_its_output(self):
        names = ["rank2_0", "rank2_1"]
        out = self.average(names, self.path("avg/"))
        again = self.path("again.pt")
        swavg("average", out, out, "-o", again)
        self.assert_same(load_output(again), reference_average(names))
        p = swavg("inspect", out)
        self.assertIn("embed.weight", p.stdout + p.stderr)

    def test_shard_parallel_is_byte_identical(self):
        names = ["rank4_0", "rank4_1"]
        target = self.path("sp/")
        self.average(names, target)
        single = self.path("single")
        os.rename(target, single)
        self.average(names, target, "--shard", "0/2")
        # worker 1 in torchrun's form (RANK, WORLD_SIZE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        env.update(RANK="1", WORLD_SIZE="2")
        p = subprocess.run([SWAVG, "average", *[dcp(n) for n in names], "--format", "dcp", "-o", target],
                           capture_output=True, text=True, env=env, timeout=600)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(target))
        self.assertEqual(sorted(f for f in os.listdir(target.rstrip("/") + ".partial") if f.endswith(".distcp")),
                         ["__0_0.distcp", "__1_0.distcp", "__2_0.distcp", "__3_0.distcp"])
        swavg("finalize", target)
        files = sorted(os.listdir(target))
        self.assertEqual(files, sorted(os.listdir(single)))
        self.assertIn(".metadata", files)
        match, mismatch, errors = filecmp.cmpfiles(single, target, files, shallow=False)
        self.assertEqual((mismatch, errors), ([], []))

    def test_file_output_is_refused(self):
        for args in (["average", dcp("rank2_0"), dcp("rank2_1")], ["convert", dcp("rank2_0")]):
            with self.subTest(command=args[0]):
                out = self.path("x.pt")
                p = swavg(*args, "--format", "dcp", "-o", out, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("swavg: error:", p.stderr)
                self.assertIn("not one file", p.stderr)
                self.assertIn(out + "/", p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_max_shard_size_is_refused(self):
        for args in (["average", dcp("rank2_0"), dcp("rank2_1")], ["convert", dcp("rank2_0")]):
            with self.subTest(command=args[0]):
                out = self.path("x/")
                p = swavg(*args, "--format", "dcp", "--max-shard-size", "1MB", "-o", out, check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("swavg: error:", p.stderr)
                self.assertIn("--max-shard-size", p.stderr)
                self.assertFalse(os.path.exists(out))

    def test_dry_run_plans_the_rank_files(self):
        """--dry-run --json names the files and sizes the real run writes, byte for byte."""
        import json
        for args in (["average", "--sort", "none", dcp("rank4_0"), dcp("rank2_1")], ["convert", dcp("rank2_0")],
                     ["average", "--shard", "1/2", dcp("rank4_0"), dcp("rank4_1")]):
            with self.subTest(args=args):
                out = self.path("dry/")
                plan = json.loads(swavg(*args, "--format", "dcp", "-o", out, "--dry-run", "--json").stdout)
                self.assertFalse(os.path.exists(out))
                swavg(*args, "--format", "dcp", "-o", out)
                where = out if os.path.exists(out) else out.rstrip("/") + ".partial"
                files = plan["output"]["files"]
                self.assertEqual(plan["output"]["index"], ".metadata")
                for f in files:
                    self.assertTrue(f["bytes_exact"])
                    path = os.path.join(where, f["file"])
                    self.assertEqual(os.path.exists(path), f["written"], f["file"])
                    if f["written"]:
                        self.assertEqual(os.path.getsize(path), f["bytes"], f["file"])
                self.assertEqual(sorted(f["file"] for f in files),
                                 sorted(x for x in os.listdir(dcp(args[-1] if args[0] == "convert" else args[-2]))
                                        if x.endswith(".distcp")))
                shutil.rmtree(where)

    def test_non_tensor_entries(self):
        out = self.path("flat/")
        p = swavg("average", dcp("flat_0"), dcp("flat_1"), "--format", "dcp", "-o", out, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--drop-objects", p.stderr)
        self.assertFalse(os.path.exists(out))
        self.assertEqual([f for f in os.listdir(self.tmp)], [])  # no partial output either
        swavg("average", dcp("flat_0"), dcp("flat_1"), "--format", "dcp", "--drop-objects", "-o", out)
        refs = [flat(consolidated(n)[1]) for n in ("flat_0", "flat_1")]
        want = {k: fold(swa_fold, [r[k] for r in refs]) for k, v in refs[0].items() if isinstance(v, torch.Tensor)}
        self.assert_same(self.load_one_process(out, want, prefix=None), want)

    def test_a_folders_dcp_named_files_are_not_copied(self):
        # A weight file named in a folder that also holds a stray `.metadata` and `__0_0.distcp` (the
        # folder itself reads as DCP): copied into a DCP output they would replace its own; into any
        # folder, they would make it read as DCP.
        from safetensors.torch import load_file, save_file
        g = torch.Generator().manual_seed(31)
        sources = []
        for k in range(2):
            folder = self.path("hf%d" % k)
            os.makedirs(folder)
            save_file({"w": torch.randn(3, 4, generator=g), "b": torch.randn(4, generator=g)},
                      os.path.join(folder, "model.safetensors"))
            for name, text in ((".metadata", "not DCP"), ("__0_0.distcp", "not a rank file"), ("config.json", "{}")):
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            sources.append(os.path.join(folder, "model.safetensors"))
        want = {k: fold(swa_fold, [load_file(f)[k] for f in sources])
                for k in ("w", "b")}
        for fmt in ("dcp", "safetensors"):
            with self.subTest(format=fmt):
                out, report = self.path("out_%s/" % fmt), self.path("report_%s.json" % fmt)
                swavg("average", *sources, "--format", fmt, "-o", out, "--report", report)
                with open(report) as f:
                    self.assertEqual(json.load(f)["copied"], ["config.json"])
                with open(os.path.join(out, "config.json")) as f:
                    self.assertEqual(f.read(), "{}")
                if fmt == "dcp":
                    self.assert_same(self.load_one_process(out, want, prefix=None), want)
                else:
                    self.assertEqual(sorted(os.listdir(out)), ["config.json", "model.safetensors"])
                    self.assert_same(load_file(os.path.join(out, "model.safetensors")), want)


def nested_state(seed):
    """A state dict whose DCP paths hold ints: lists of tensors and of dicts, int dict keys (which DCP's
    flattening turns into str), nested under "model" beside a step count."""
    g = torch.Generator().manual_seed(7000 + seed)
    r = lambda *s: torch.randn(*s, generator=g)  # noqa: E731
    return {"model": {"blocks": [{"w": r(3, 4), "b": r(4)}, {"w": r(3, 4), "b": r(4)}],
                      "experts": {0: r(2, 2), 1: r(2, 2)}, "heads": [r(5), r(5), r(5)], "norm": r(4)},
            "step": 10 + seed}


def structure(obj):
    """The containers of a (consolidated) state dict: dicts by key, lists by index, leaves by type."""
    if isinstance(obj, dict):
        return {k: structure(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [structure(v) for v in obj]
    return "tensor" if isinstance(obj, torch.Tensor) else type(obj).__name__


def leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, path + (k,))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            yield from leaves(v, path + (i,))
    else:
        yield path, obj


def metadata_bytes(md, base):
    """md pickled with every chunk's offset moved by the pickle's own length (found by iterating):
    the bytes of .metadata when the chunks follow it in the same file."""
    import copy
    size = 0
    for _ in range(10):
        shifted = copy.deepcopy(md)
        for info in shifted.storage_data.values():
            info.relative_path = ".metadata"
            info.offset += size
        data = pickle.dumps(shifted)
        if len(data) == size:
            return data
        size = len(data)
    raise AssertionError("no fixed point")


class DcpFolderTest(TempDirTest):
    """Small DCP folders saved by torch here, and the checks of an output against them."""

    def save(self, name, state, **kw):
        folder = self.path(name)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp_api.save(state, checkpoint_id=folder, no_dist=True, **kw)
        return folder

    def consolidate(self, folder):
        from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
        out = folder.rstrip("/") + ".consolidated.pt"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp_to_torch_save(folder, out)
        return torch.load(out, weights_only=False)

    def check_like_input(self, out, inputs, key, fold=swa_fold):
        """out/ consolidates to the first input's structure (under `key`), holding fold's result."""
        refs = [self.consolidate(i) for i in inputs]
        got = self.consolidate(out)
        want_tree = refs[0][key] if key else {k: v for k, v in refs[0].items() if isinstance(v, (dict, list))}
        self.assertEqual(structure(got[key] if key else got), structure(want_tree))
        ref_leaves = [dict(leaves(r[key] if key else r)) for r in refs]
        for path, t in leaves(got[key] if key else got):
            with self.subTest(path=path):
                self.assertTrue(same_bits(t, fold([r[path] for r in ref_leaves])), path)
        # dcp.load into the input's own structure (lists and all) gives the same tensors
        state = {key: want_tree} if key else dict(want_tree)
        state = {k: v for k, v in state.items()}
        empty = torch.utils._pytree.tree_map(lambda t: torch.zeros_like(t) if isinstance(t, torch.Tensor) else t,
                                             state)
        dcp_api.load(empty, checkpoint_id=out)
        for path, t in leaves(empty[key] if key else empty):
            self.assertTrue(same_bits(t, dict(leaves(got[key] if key else got))[path]), path)
        return got


class DcpStructureTest(DcpFolderTest):
    """DCP outputs unflatten as their input does (lists stay lists) and never name a rank file after a
    name the format reserves, checked by torch's dcp.load and dcp_to_torch_save."""

    def test_lists_and_int_keys_come_back(self):
        ins = [self.save("in%d" % i, nested_state(i)) for i in range(2)]
        out = self.path("avg/")
        swavg("average", *ins, "--format", "dcp", "-o", out)
        got = self.check_like_input(out, ins, "model")
        self.assertIsInstance(got["model"]["blocks"], list)
        self.assertIsInstance(got["model"]["heads"], list)
        self.assertEqual(sorted(got["model"]["experts"]), ["0", "1"])  # str, as DCP keeps them in the input too
        md = metadata(out)
        self.assertEqual(md.planner_data["model.blocks.1.w"], ("model", "blocks", 1, "w"))
        self.assertEqual(md.planner_data["model.heads.2"], ("model", "heads", 2))
        self.assertEqual(md.planner_data["model.experts.0"], ("model", "experts", "0"))

    def test_top_level_lists(self):
        ins = [self.save("flat%d" % i, {"layers": nested_state(i)["model"]["heads"],
                                        "w": nested_state(i)["model"]["norm"]}) for i in range(2)]
        for cmd in (["average", *ins], ["ema", "--decay", "0.5", *ins], ["convert", ins[0]]):
            with self.subTest(command=cmd[0]):
                out = self.path(cmd[0] + "/")
                swavg(*cmd, "--format", "dcp", "-o", out)
                got = self.consolidate(out)
                self.assertIsInstance(got["layers"], list)
                self.assertEqual(len(got["layers"]), 3)
                self.assertEqual(metadata(out).planner_data["layers.1"], ("layers", 1))

    def test_chunks_inside_the_metadata_file(self):
        """A one-process folder whose chunks lie in the file named .metadata, after the pickle (torch
        reads it): the output's rank file takes another name, and torch reads the output."""
        ins = []
        for i in range(2):
            src = self.save("src%d" % i, {"model": nested_state(i)["model"]})
            md = metadata(src)
            (rank_file,) = {v.relative_path for v in md.storage_data.values()}
            with open(os.path.join(src, rank_file), "rb") as f:
                chunks = f.read()
            folder = self.path("inside%d" % i)
            os.mkdir(folder)
            with open(os.path.join(folder, ".metadata"), "wb") as f:
                f.write(metadata_bytes(md, 0) + chunks)
            self.assertEqual(os.listdir(folder), [".metadata"])
            ins.append(folder)
        want = self.consolidate(ins[0])  # torch itself reads the input
        self.assertIsInstance(want["model"]["blocks"], list)
        out = self.path("avg/")
        swavg("average", *ins, "--sort", "none", "--format", "dcp", "-o", out)
        self.assertEqual(sorted(os.listdir(out)), [".metadata", "__0_0.distcp"])
        self.assertEqual({v.relative_path for v in metadata(out).storage_data.values()}, {"__0_0.distcp"})
        self.check_like_input(out, ins, "model")
        # and a rank file named like swavg's job files is renamed too, shard-parallel included
        md = metadata(ins[1])
        folder = self.path("plan_named")
        os.mkdir(folder)
        shutil.copy(os.path.join(ins[1], ".metadata"), os.path.join(folder, "swavg-plan.json"))
        for info in md.storage_data.values():
            info.relative_path = "swavg-plan.json"
        with open(os.path.join(folder, ".metadata"), "wb") as f:
            pickle.dump(md, f)
        out = self.path("plan_out/")
        swavg("average", folder, ins[0], "--sort", "none", "--format", "dcp", "--shard", "0/1", "-o", out)
        if not os.path.exists(out):
            swavg("finalize", out)
        self.assertEqual(sorted(os.listdir(out)), [".metadata", "__0_0.distcp"])
        self.check_like_input(out, [folder, ins[0]], "model")


class DcpResumeTest(DcpFolderTest):
    """A DCP output resumes like any other: swavg's record rides in .metadata as an attribute of the
    Metadata object (torch's pickle.load sets it, DCP ignores it)."""

    def test_rolling_ema(self):
        ins = [self.save("in%d" % i, nested_state(i)) for i in range(5)]
        whole = self.path("whole/")
        swavg("ema", "--decay", "0.9", *ins, "--format", "dcp", "-o", whole)
        prev = None
        for i, piece in enumerate((ins[:2], ins[2:3], ins[3:])):
            out = self.path("roll%d/" % i)
            swavg("ema", "--decay", "0.9", *(["--resume", prev] if prev else []), *piece, "--format", "dcp", "-o", out)
            prev = out
        got, want = self.consolidate(prev), self.consolidate(whole)
        self.assertEqual(structure(got), structure(want))
        refs = [dict(leaves(self.consolidate(i)["model"])) for i in ins]
        decays = ema_decays(len(ins), 0.9)
        for path, t in leaves(got["model"]):
            with self.subTest(path=path):
                self.assertTrue(same_bits(t, dict(leaves(want["model"]))[path]), path)
                self.assertTrue(same_bits(t, ema_fold([r[path] for r in refs], decays)), path)
        self.check_like_input(prev, ins, "model", lambda ts: ema_fold(ts, decays))
        import json
        record = json.loads(metadata(prev).swavg_metadata["swavg"])  # what torch's own pickle.load sees
        self.assertEqual(record["mode"], "ema")
        self.assertEqual(record["n"], 5)

    def test_resume_from_average(self):
        ins = [self.save("in%d" % i, nested_state(i)) for i in range(3)]
        first = self.path("first/")
        swavg("average", *ins[:2], "--format", "dcp", "-o", first)
        out = self.path("out/")
        swavg("average", "--resume", first, ins[2], "--format", "dcp", "-o", out)
        got = self.consolidate(out)
        refs = [dict(leaves(self.consolidate(i)["model"])) for i in ins]
        for path, t in leaves(got["model"]):
            self.assertTrue(same_bits(t, swa_fold([r[path] for r in refs])), path)
        p = swavg("ema", "--decay", "0.9", "--resume", first, ins[2], "--format", "dcp", "-o", self.path("x/"),
                  check=False)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("was made in swa mode, cannot resume it in ema mode", p.stderr)


if __name__ == "__main__":
    unittest.main()
