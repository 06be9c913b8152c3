"""Run swavg from Python: one function per subcommand, keyword arguments for its options.

    import swavg
    report = swavg.ema(["ckpt/step_500.pt", "ckpt/step_1000.pt"], "ema.pt", decay=0.999, force=True)
    plan = swavg.average(paths, "swa.pt", dry_run=True)       # what the run would do, as a dict
    info = swavg.inspect("swa.pt")                             # inspect --json, as a dict
    swavg.update_bn(model, loader, "swa_bn.pt", checkpoint="swa.pt")   # an nn.Module and its batches

Keyword options become the command's flags: ``decay=0.999`` is ``--decay 0.999``, ``force=True``
is ``--force`` (False and None leave the flag out), a list repeats the flag (``strip_prefix=["module.",
"_orig_mod."]``), except for the options that take one comma list (``weights=[1, 2, 1]`` is
``--weights 1,2,1``). ``swavg <command> --help`` lists every option.

Order: a list of inputs is passed to swavg in the order given, and swavg's own ``--sort`` then
decides the order of the fold. By default swavg folds checkpoints in step order (natural order:
``ckpt_2`` before ``ckpt_10``, ``checkpoint-500/`` before ``checkpoint-1000/``); ``sort="none"``
keeps the order of the list. EMA, ``buffers="latest"``, ``last=N`` and ``every=K`` depend on it.

Progress: swavg's messages and progress go to this process's ``sys.stderr`` as they come
(``progress=False``: kept quiet; ``progress=callable``: each line is passed to it instead).

Errors: a non-zero exit raises the SwavgError subclass of its exit code, whose message is the cause
(swavg's error lines, without their ``swavg: error:`` prefix), with ``exit_code``, ``stderr`` (all
of it), ``hint`` (the advice printed after the error, or None), ``report`` and ``command``.
Nothing here needs torch, except ``update_bn`` given an ``nn.Module``, a tensor or batches.
"""
from __future__ import annotations

import codecs
import copy
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Type, Union

__all__ = [
    "SwavgError",
    "InternalError",
    "UsageError",
    "InputError",
    "MismatchError",
    "StorageError",
    "IOError_",
    "IncompleteError",
    "binary",
    "option_args",
    "run",
    "average",
    "ema",
    "posthoc_ema",
    "watch",
    "inspect",
    "convert",
    "finalize",
    "update_bn",
]

PathLike = Union[str, "os.PathLike[str]"]
Inputs = Union[PathLike, Iterable[PathLike]]
Report = Dict[str, Any]
# True: swavg's stderr is copied to sys.stderr as it comes; False: kept; a callable: called per line.
Progress = Union[bool, Callable[[str], Any]]

# Options that take one comma-separated list instead of one value per use.
COMMA_LISTS = frozenset({"weights", "shape", "snapshot_times", "snapshot_sigmas"})
# Commands that write a JSON report with --report FILE, and those that print one with --json.
_REPORT_FILE_COMMANDS = frozenset({"average", "ema", "posthoc-ema", "update-bn"})
_REPORT_STDOUT_COMMANDS = frozenset({"inspect", "finalize"})
_ERROR_PREFIX = "swavg: error:"
_LOG_PREFIXES = ("swavg: info:", "swavg: warning:", "swavg: debug:", "swavg: trace:", "swavg: critical:")


def _after_prefix(line: str) -> str:
    """An error line's text: `swavg: error: ` and nothing else removed (a list's indent stays)."""
    text = line[len(_ERROR_PREFIX):]
    return (text[1:] if text.startswith(" ") else text).rstrip()


def _error_parts(stderr: str, exit_code: int):
    """(message, hint) from swavg's stderr: the message is every `swavg: error:` line, without the
    prefix; the hint is what follows the last error line and is not a log line (CLI11's "Run with
    --help ...", a `swavg: hint:` line), or None."""
    lines = [line.rstrip("\r") for line in stderr.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if line.startswith(_ERROR_PREFIX)]
    hints = [line.split(":", 2)[2].strip() for line in lines if line.startswith(("swavg: hint:", "swavg: note:"))]
    if errors:
        message = "\n".join(_after_prefix(lines[i]) for i in errors)
        after = [line for line in lines[errors[-1] + 1:]
                 if not line.startswith(_LOG_PREFIXES) and not line.startswith(("swavg: hint:", "swavg: note:"))]
        hints += [line.strip() for line in after]
    else:
        # No error line (a crash, or a binary older than its messages): the lines that are not log
        # lines nor a trailing "Run with --help" hint.
        plain = [line for line in lines if not line.startswith(_LOG_PREFIXES)]
        tail = [line for line in plain if line.startswith("Run with --help")]
        body = [line for line in plain if not line.startswith("Run with --help")]
        message = "\n".join(body) or "swavg exited %d" % exit_code
        hints += tail
    return message, ("\n".join(hints) if hints else None)


class SwavgError(RuntimeError):
    """swavg exited non-zero. str(e) is the cause (its error lines, without `swavg: error:`);
    exit_code, stderr (all of it), hint (the advice after the error, or None), report (a dict, or
    None) and command (the arguments) say the rest."""

    exit_code: int = 1

    def __init__(self, exit_code: int, stderr: str, report: Optional[Report] = None,
                 args: Sequence[str] = ()) -> None:
        message, hint = _error_parts(stderr, exit_code)
        super().__init__(message)
        self.exit_code = exit_code
        self.stderr = stderr
        self.hint = hint
        self.report = report
        self.command = list(args)


class InternalError(SwavgError):
    """Exit 1: a bug or an unexpected failure."""

    exit_code = 1


class UsageError(SwavgError):
    """Exit 2: a bad command line (an unknown option, a value out of range)."""

    exit_code = 2


class InputError(SwavgError):
    """Exit 3: an input file is malformed, unsupported or unsafe."""

    exit_code = 3


class MismatchError(SwavgError):
    """Exit 4: the inputs disagree with each other (names, shapes, dtypes)."""

    exit_code = 4


class StorageError(SwavgError):
    """Exit 5: a file cannot be read or written (missing, permissions, disk full)."""

    exit_code = 5


IOError_ = StorageError  # the name of util/error.h's io_error, without shadowing the builtin IOError


class IncompleteError(SwavgError):
    """Exit 6: a shard-parallel job is not finished (finalize before every worker wrote its part)."""

    exit_code = 6


_ERRORS: Dict[int, Type[SwavgError]] = {
    c.exit_code: c for c in (InternalError, UsageError, InputError, MismatchError, StorageError, IncompleteError)
}


def binary() -> str:
    """The swavg binary: $SWAVG_BIN, else the one installed beside this Python, else swavg on PATH."""
    named = os.environ.get("SWAVG_BIN")
    if named:
        return named
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "swavg")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which("swavg")
    if found:
        return found
    raise FileNotFoundError("the swavg binary is not installed with this Python (pip install swavg's source "
                            "folder) nor on PATH; set SWAVG_BIN to its path")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        raise TypeError("a boolean inside a list of option values: %r" % value)
    if isinstance(value, float):
        return repr(value)  # the shortest text that reads back as the same double
    if isinstance(value, (str, int)):
        return str(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError("an option value must be a str, a number or a path, got %s" % type(value).__name__)


def _path(value: PathLike) -> str:
    """A path as an argument: one beginning with '-' gets './' so it does not read as an option."""
    text = os.fspath(value)
    return "./" + text if text.startswith("-") else text


def option_args(options: Mapping[str, Any]) -> List[str]:
    """The flags for keyword options: max_shard_size="5GB" -> ["--max-shard-size", "5GB"], force=True ->
    ["--force"], False or None -> nothing, a list -> the flag repeated (one comma list for COMMA_LISTS,
    unless it holds strings or lists: weights=["sma", [1, 2, 1]] repeats --weights, one output each),
    a one-letter name -> a short flag (o="x.pt" -> ["-o", "x.pt"])."""
    args: List[str] = []
    for key, value in options.items():
        flag = ("-" if len(key) == 1 else "--") + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            if key in COMMA_LISTS and any(isinstance(v, (str, list, tuple)) for v in value):
                # several values, one output each: weights=["sma", [1, 2, 1]] -> --weights sma --weights 1,2,1
                for v in value:
                    args += [flag, ",".join(map(_text, v)) if isinstance(v, (list, tuple)) else _text(v)]
                continue
            values = [_text(v) for v in value]
            if key in COMMA_LISTS:
                args += [flag, ",".join(values)]
            else:
                for v in values:
                    args += [flag, v]
        else:
            args += [flag, _text(value)]
    return args


def _command(args: Sequence[str]) -> Optional[str]:
    for a in args:
        if not a.startswith("-"):
            return a
    return None


def _option_value(args: Sequence[str], name: str) -> Optional[str]:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a[len(name) + 1:]
    return None


def _read_report(path: Optional[str]) -> Optional[Report]:
    if path is None or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class _StderrPump:
    """Reads the child's stderr as it comes: keeps all of it, and copies it to sys.stderr (progress
    True) or hands each line (split at \\n and \\r, without them) to a callable."""

    def __init__(self, stream, progress: Progress) -> None:
        self.stream = stream
        self.progress = progress
        self.parts: List[str] = []
        self.pending = ""
        self.failure: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._pump, name="swavg-stderr", daemon=True)
        self.thread.start()

    def _emit(self, text: str, final: bool = False) -> None:
        self.parts.append(text)
        if self.progress is True:
            sys.stderr.write(text)
            sys.stderr.flush()
        elif callable(self.progress):
            self.pending += text
            pieces = self.pending.replace("\r\n", "\n").replace("\r", "\n").split("\n")
            self.pending = "" if final else pieces.pop()
            for line in pieces:
                if line:
                    self.progress(line)

    def _pump(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        fd = self.stream.fileno()
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._emit(decoder.decode(chunk))
            self._emit(decoder.decode(b"", final=True), final=True)
        except BaseException as e:  # a callable that raised: reported by join()
            self.failure = e
            while os.read(fd, 65536):  # keep draining, so the child never blocks on a full pipe
                pass

    def join(self) -> str:
        self.thread.join()
        if self.failure is not None:
            raise self.failure
        return "".join(self.parts)


def _execute(argv: List[str], timeout: Optional[float], progress: Progress):
    """Runs the binary; returns (exit code, stdout, stderr). stdout is read whole; stderr goes
    through a _StderrPump. The child is stopped if this process is interrupted or times out."""
    proc = subprocess.Popen([binary(), *argv], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        pump = _StderrPump(proc.stderr, progress)
        out: List[bytes] = []
        reader = threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)
        reader.start()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        reader.join()
        stderr = pump.join()
    finally:
        if proc.poll() is None:  # KeyboardInterrupt or another exception while it ran
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return code, (out[0] if out else b"").decode("utf-8", errors="replace"), stderr


def run(args: Sequence[Any], *, timeout: Optional[float] = None, progress: Progress = True) -> Optional[Report]:
    """Runs `swavg ARGS...`; returns its JSON report as a dict (None for a command without one).

    average, ema, posthoc-ema and update-bn write it with --report (a temporary file unless ARGS name
    one); inspect and finalize print it with --json; with --dry-run and --json the plan printed on
    stdout is returned. progress: True copies swavg's stderr (messages, progress) to sys.stderr as
    it comes, False keeps it quiet, a callable gets each line. Raises the SwavgError subclass of a
    non-zero exit code; subprocess.TimeoutExpired after timeout seconds (the run is stopped)."""
    argv = [_text(a) for a in args]
    command = _command(argv)
    dry_json = "--dry-run" in argv  # a dry run's plan, printed with --json, is what it returns
    if dry_json and "--json" not in argv:
        argv.append("--json")
    report_file = _option_value(argv, "--report")
    with tempfile.TemporaryDirectory(prefix="swavg-py-") as tmp:
        if command in _REPORT_FILE_COMMANDS and report_file is None and not dry_json:
            report_file = os.path.join(tmp, "report.json")
            argv += ["--report", report_file]
        stdout_json = command in _REPORT_STDOUT_COMMANDS or dry_json
        if command in _REPORT_STDOUT_COMMANDS and "--json" not in argv:
            argv.append("--json")
        code, stdout, stderr = _execute(argv, timeout, progress)
        report = _read_report(report_file) if command in _REPORT_FILE_COMMANDS and not dry_json else None
    if stdout_json and code == 0:
        report = json.loads(stdout)
    if code != 0:
        raise _ERRORS.get(code, SwavgError)(code, stderr, report, argv)
    return report


def _inputs(inputs: Inputs) -> List[str]:
    if isinstance(inputs, (str, os.PathLike)):
        return [_path(inputs)]
    return [_path(i) for i in inputs]


def _fold(command: str, inputs: Inputs, output: PathLike, options: Dict[str, Any], dry_run: bool,
          progress: Progress, timeout: Optional[float]) -> Report:
    args = [command, *_inputs(inputs), "-o", _path(output), *option_args(options)]
    if dry_run:
        args += ["--dry-run", "--json"]
    report = run(args, timeout=timeout, progress=progress)
    assert report is not None
    return report


def average(inputs: Inputs, output: PathLike, *, weights: Optional[Union[Sequence[float], str]] = None,
            sort: Optional[str] = None, dry_run: bool = False, progress: Progress = True,
            timeout: Optional[float] = None, **options: Any) -> Report:
    """`swavg average INPUTS -o OUTPUT`: SWA (equal weights, as AveragedModel), or a weighted average
    with weights=[...] (in fold order) or a recipe (weights="wma", "ema:0.9", "wsm:cosine": see
    docs/averaging.md). Returns the report (--report's JSON) as a dict; with
    dry_run=True nothing is written and the plan (--dry-run --json) is returned instead.

    inputs: checkpoint files or folders, passed in the order given; swavg folds them in step order
    (natural order, its default --sort) unless sort="none" (the list's order), "name" or "mtime".
    Other options as keywords: key="state_dict", strip_prefix=["module."], last=5, every=2,
    bottom=5, metric="eval_loss", from_step=1000, buffers="average", max_shard_size="5GB", force=True,
    ... (swavg average --help)."""
    return _fold("average", inputs, output, {"weights": weights, "sort": sort, **options}, dry_run, progress,
                 timeout)


def ema(inputs: Inputs, output: PathLike, decay: Optional[float] = None, *, sort: Optional[str] = None,
        dry_run: bool = False, progress: Progress = True, timeout: Optional[float] = None,
        **options: Any) -> Report:
    """`swavg ema INPUTS -o OUTPUT --decay D`: an exponential moving average
    (avg.lerp(x, 1 - D), as get_ema_multi_avg_fn). Returns the report as a dict; with dry_run=True
    the plan instead.

    The result depends on the order: inputs are passed in the order given and swavg folds them in
    step order (natural order, its default --sort) unless sort="none" keeps the list's order.
    Other options as keywords: warmup="torch_ema", last=10, power_sigma_rel=0.05, resume="ema.pt",
    force=True, ... (swavg ema --help)."""
    return _fold("ema", inputs, output, {"decay": decay, "sort": sort, **options}, dry_run, progress, timeout)


def posthoc_ema(inputs: Inputs, output: PathLike, sigma_rel: Union[float, Sequence[float]], *,
                dry_run: bool = False, progress: Progress = True, timeout: Optional[float] = None,
                **options: Any) -> Report:
    """`swavg posthoc-ema --sigma-rel S SNAPSHOTS -o OUTPUT`: EDM2's post-hoc EMA. sigma_rel is one
    value or a list (then OUTPUT is a pattern holding {sigma_rel}). The snapshots' order is their
    training time t (from names like snap-0004096-0.050.pt, or snapshot_times=[...]), not the list's.
    Other options: at=T, snapshot_sigmas=[...], output_dtype="float32", force=True, ...
    Returns the report as a dict; with dry_run=True the plan instead."""
    return _fold("posthoc-ema", inputs, output, {"sigma_rel": sigma_rel, **options}, dry_run, progress, timeout)


def watch(run_dir: PathLike, output: PathLike, *, decay: Optional[Union[float, Sequence[float]]] = None,
          mode: Optional[str] = None, progress: Progress = True, timeout: Optional[float] = None,
          **options: Any) -> Report:
    """`swavg watch average|ema RUN_DIR -o OUTPUT`: folds each checkpoint of a training run's folder
    into a running average as the trainer writes it (docs/watch.md), until it stops: once=True
    (what is whole now), until_step=N, idle_timeout=S, a signal, or timeout (then it is stopped, and
    subprocess.TimeoutExpired raised; the output holds every checkpoint folded so far). mode is
    "average" (SWA) or "ema" (the default when decay is given). Returns the watcher's final status
    (--status's JSON: "folded", "skipped", "missed", ...) as a dict.
    Other options as keywords: match="checkpoint-*", poll=5, settle=2, from_step=1000,
    output_dtype="float32", report="last_fold.json", ... (swavg watch average --help)."""
    mode = mode or ("ema" if decay is not None else "average")
    status = _path(options.pop("status", None) or (_path(output).rstrip("/") + ".watch.json"))
    args = ["watch", mode, _path(run_dir), "-o", _path(output), "--status", status,
            *option_args({"decay": decay, **options})]
    run(args, timeout=timeout, progress=progress)
    status_report = _read_report(status)
    assert status_report is not None
    return status_report


def inspect(checkpoint: PathLike, *, progress: Progress = False, timeout: Optional[float] = None,
            **options: Any) -> Report:
    """`swavg inspect CHECKPOINT --json`, returned as a dict: the format, the state dict taken (key),
    every tensor (name, dtype, shape), the non-tensor entries and the metadata. Options: key="model",
    strip_prefix=["module."]."""
    report = run(["inspect", _path(checkpoint), *option_args(options), "--json"], timeout=timeout,
                 progress=progress)
    assert report is not None
    return report


def convert(checkpoint: PathLike, output: PathLike, *, dry_run: bool = False, progress: Progress = True,
            timeout: Optional[float] = None, **options: Any) -> Optional[Report]:
    """`swavg convert CHECKPOINT -o OUTPUT`: another format (.safetensors, .pt, a folder DIR/ of
    shards with max_shard_size="5GB", format="dcp"). Options: key="model", strip_prefix=["module."],
    drop_objects=True, force=True. Returns None; with dry_run=True the plan as a dict, nothing written."""
    args = ["convert", _path(checkpoint), "-o", _path(output), *option_args(options)]
    if dry_run:
        args += ["--dry-run", "--json"]
    return run(args, timeout=timeout, progress=progress)


def finalize(output: PathLike, *, progress: Progress = True, timeout: Optional[float] = None,
             **options: Any) -> Report:
    """`swavg finalize OUTPUT/ --json`: publishes a shard-parallel job's folder once every worker
    (average/ema with shard="I/N") has written its part; returns the report as a dict. Raises
    IncompleteError (exit 6) while a worker is missing: call it again later. Options: no_verify=True
    (sizes only), force=True."""
    report = run(["finalize", _path(output), *option_args(options), "--json"], timeout=timeout, progress=progress)
    assert report is not None
    return report


def update_bn(model: Any, data: Any, output: Optional[PathLike] = None, *, checkpoint: Optional[PathLike] = None,
              progress: Progress = True, timeout: Optional[float] = None, **options: Any) -> Report:
    """Recomputes BatchNorm statistics as torch.optim.swa_utils.update_bn(loader, model) does, with
    `swavg update-bn`; returns the report as a dict.

    model: a TorchScript file (.ts) or torch.export program (.pt2), or an nn.Module: exported with
      the first batch (torch.export in train mode, a dynamic batch dimension, run_decompositions())
      into a temporary .pt2, else (no batches given, a module torch.export cannot take, an operator
      swavg does not run, save_module=) scripted (torch.jit.script, else traced in training mode)
      into a .ts; the module itself is then updated in place (its parameters and buffers loaded
      from the result: checkpoint's weights included when given), as update_bn updates it.
    data: a file swavg reads (.npy, a torch.save'd tensor, safetensors, raw with shape=...), a tensor
      of samples [N, ...] (batch_size= as for a file), or an iterable of batches (a DataLoader: each
      batch a tensor, or a list/tuple whose first item is the input, as update_bn takes it), written
      by this function into a temporary file in the order given. Every batch but the last must have
      the same size, which becomes --batch-size.
    output: the updated state dict (any format swavg writes); optional with an nn.Module.
    Options: batch_size=128, drop_last=True, max_batches=N, input_dtype="float32", device="cuda",
    key=..., strip_prefix=[...], save_module="net_bn.ts", force=True (swavg update-bn --help)."""
    with tempfile.TemporaryDirectory(prefix="swavg-py-bn-") as tmp:
        module = None if _is_path(model) else model
        data_args, first_batch = _data_args(data, tmp, options)
        out = output
        if out is None and module is not None:
            out = os.path.join(tmp, "updated.pt")

        def update(model_path: str) -> Optional[Report]:
            weights = checkpoint
            if weights is None and model_path.endswith(".pt2"):
                # The module's own state dict: the output keeps its names in its order (a program's
                # weights come in ep.state_dict()'s, parameters first).
                import torch
                weights = os.path.join(tmp, "weights.pt")
                torch.save(module.state_dict(), weights)
            named = {"model": model_path, "checkpoint": None if weights is None else _path(weights),
                     **data_args, "o": None if out is None else _path(out)}
            return run(["update-bn", *option_args(named), *option_args(options)], timeout=timeout, progress=progress)

        program = None if module is None or options.get("save_module") else _export(module, first_batch, tmp)
        try:
            report = update(_path(model) if module is None else program or _script(module, first_batch, tmp))
        except InputError as refused:
            # A program that uses an operator swavg does not run: TorchScript runs any module.
            if program is None or "not on swavg's list of operators" not in str(refused):
                raise
            report = update(_script(module, first_batch, tmp))
        assert report is not None
        if module is not None and out is not None:
            _load_into(module, os.fspath(out))
    return report


def _is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _data_args(data: Any, tmp: str, options: Dict[str, Any]):
    """The --data options for a path, a tensor of samples or an iterable of batches (then written as
    raw bytes with --shape and --dtype, and --batch-size set from the batches); and the first batch."""
    if _is_path(data):
        return {"data": _path(data)}, None
    import torch

    if isinstance(data, torch.Tensor):
        path, shape, dtype = _write_raw([data], tmp)
        return {"data": path, "shape": shape, "dtype": dtype}, data[: options.get("batch_size") or 32]
    if "batch_size" in options and options["batch_size"] is not None:
        raise TypeError("update_bn: batch_size= is set by the batches themselves; leave it out with an iterable "
                        "of batches (or pass one tensor of samples)")
    batches = (b[0] if isinstance(b, (list, tuple)) else b for b in data)
    first: List[Any] = []
    sizes: List[int] = []

    def checked():
        for i, b in enumerate(batches):
            if not isinstance(b, torch.Tensor):
                raise TypeError("update_bn: batch %d is a %s, not a tensor (or a list/tuple whose first item is "
                                "one)" % (i, type(b).__name__))
            if sizes and sizes[-1] != sizes[0]:
                raise ValueError("update_bn: batch %d has %d samples but batch 0 has %d: swavg replays batches of "
                                 "one size (only the last may be smaller)" % (i - 1, sizes[-1], sizes[0]))
            if sizes and b.shape[0] > sizes[0]:
                raise ValueError("update_bn: batch %d has %d samples, more than batch 0's %d: swavg replays "
                                 "batches of one size (only the last may be smaller)" % (i, b.shape[0], sizes[0]))
            sizes.append(int(b.shape[0]))
            if not first:
                first.append(b)
            yield b

    path, shape, dtype = _write_raw(checked(), tmp)
    return {"data": path, "shape": shape, "dtype": dtype, "batch_size": sizes[0]}, first[0]


def _write_raw(batches: Iterable[Any], tmp: str):
    """Writes tensors [B, ...] one after another as raw little-endian bytes (swavg's raw data format,
    any dtype, bfloat16 included); returns (path, the shape of one sample, the dtype's name)."""
    import torch

    if sys.byteorder != "little":
        raise RuntimeError("update_bn: batches can be handed over on little-endian machines only")
    path = os.path.join(tmp, "batches.bin")
    sample = None
    dtype = None
    with open(path, "wb") as f:
        for i, b in enumerate(batches):
            if b.dim() < 2:
                raise ValueError("update_bn: batch %d has shape %s: a batch is [batch size, ...] with at least one "
                                 "dimension per sample" % (i, tuple(b.shape)))
            if sample is None:
                sample, dtype = tuple(b.shape[1:]), b.dtype
            elif tuple(b.shape[1:]) != sample or b.dtype != dtype:
                raise ValueError("update_bn: batch %d holds samples of %s %s, batch 0 of %s %s"
                                 % (i, str(b.dtype).replace("torch.", ""), tuple(b.shape[1:]),
                                    str(dtype).replace("torch.", ""), sample))
            flat = b.detach().to("cpu").contiguous().reshape(-1)
            f.write(flat.view(torch.uint8).numpy().tobytes() if flat.element_size() > 1 else flat.numpy().tobytes())
    if sample is None:
        raise ValueError("update_bn: no batches")
    if any(s == 0 for s in sample):
        raise ValueError("update_bn: samples of shape %s hold no elements" % (sample,))
    return path, list(sample), str(dtype).replace("torch.", "")


def _export(module: Any, first_batch: Any, tmp: str) -> Optional[str]:
    """Saves an nn.Module as a torch.export program for swavg (train mode, a dynamic batch dimension,
    core ATen: update_bn's statistics bit for bit on the CPU), exported from a copy with the first
    batch; None when this torch has no torch.export or the module does not export (a BatchNorm with
    momentum=None, data-dependent control flow): _script then saves it as TorchScript."""
    import torch

    if first_batch is None or not hasattr(torch, "export") or isinstance(module, torch.jit.ScriptModule):
        return None
    if not isinstance(module, torch.nn.Module) or first_batch.dim() < 1 or first_batch.shape[0] < 2:
        return None
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is None for m in module.modules()):
        return None  # num_batches_tracked decides the momentum: torch.export refuses the data-dependent branch
    import logging

    path = os.path.join(tmp, "model.pt2")
    logging.disable(logging.CRITICAL)  # a failed export logs the graph it gave up on
    try:
        twin = copy.deepcopy(module).train()
        example = first_batch.to(next(twin.parameters(), first_batch).device)
        program = torch.export.export(twin, (example,), dynamic_shapes=({0: torch.export.Dim("batch")},))
        torch.export.save(program.run_decompositions(), path)
    except Exception:  # noqa: BLE001 -- any module torch.export cannot take: TorchScript instead
        return None
    finally:
        logging.disable(logging.NOTSET)
    return path


def _script(module: Any, first_batch: Any, tmp: str) -> str:
    """Saves an nn.Module as TorchScript for swavg: torch.jit.script, else torch.jit.trace of a copy in
    training mode with the first batch (the module itself is left as it was)."""
    import torch

    path = os.path.join(tmp, "model.ts")
    if isinstance(module, torch.jit.ScriptModule):
        torch.jit.save(module, path)
        return path
    if not isinstance(module, torch.nn.Module):
        raise TypeError("update_bn: model must be a path to a TorchScript file or an nn.Module, got %s"
                        % type(module).__name__)
    try:
        scripted = torch.jit.script(module)
    except Exception as scripting:  # noqa: BLE001 -- any failure of the compiler: try tracing
        if first_batch is None:
            raise TypeError("update_bn: torch.jit.script could not compile the module (%s); pass the batches "
                            "(a tensor or an iterable) so it can be traced, or a .ts file of "
                            "torch.jit.trace(model.train(), example)" % str(scripting).splitlines()[0]) from scripting
        twin = copy.deepcopy(module).train()
        scripted = torch.jit.trace(twin, first_batch.to(next(twin.parameters(), first_batch).device),
                                   check_trace=False)
    torch.jit.save(scripted, path)
    return path


def _load_into(module: Any, path: str) -> None:
    """Copies the updated state dict (either layout) into the module's own tensors, in place."""
    import torch

    with open(path, "rb") as f:
        zipped = f.read(2) == b"PK"
    if zipped:
        updated = torch.load(path, map_location="cpu", weights_only=True)
    else:
        from safetensors.torch import load_file

        updated = load_file(path)
    with torch.no_grad():
        for name, tensor in module.state_dict(keep_vars=True).items():
            source = updated.get(name, updated.get("module." + name))
            if source is not None and isinstance(tensor, torch.Tensor):
                tensor.copy_(source)
