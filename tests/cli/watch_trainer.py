"""A real transformers.Trainer run for the `swavg watch` tests: a tiny BertForSequenceClassification
(hidden size 8, 1 layer, 2 heads, vocabulary 50, built from a config: nothing fetched, HF_HUB_OFFLINE=1)
trained on CPU over random tokens from a fixed seed, saving checkpoint-<step>/ every --save-steps steps
with save_total_limit=--keep, so the Trainer itself writes and rotates checkpoints while a watcher
follows --output-dir.

A callback keeps the reference: on_save it reads the checkpoint just written
(<output-dir>/checkpoint-<global_step>/model.safetensors, its tensors under the names in that file) and
folds it into torch.optim.swa_utils.AveragedModel (the equal average, float32 on CPU) over a module whose
state_dict has those names and tensors (fake_trainer.module_of: all of them parameters here, no
running_* or num_batches_tracked); on_step_end it sleeps --step-delay seconds, which is before that
step's save and its rotation, so a checkpoint stays on disk at least --keep step delays. The Trainer
also saves at the end (a step not a multiple of --save-steps): every save is recorded, once a step.

At the end: --reference FILE (safetensors, the averaged tensors, names as in model.safetensors) and
FILE.json {"steps": [each step whose checkpoint-N was written, in order], "n": how many,
"kept": [checkpoint folders left at the end]}.

Run: python watch_trainer.py --output-dir DIR --max-steps 8 --keep 2 --step-delay 0.5 --reference ref.safetensors
"""
import argparse
import json
import os
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("DS_ACCELERATOR", "cpu")  # deepspeed, when installed, warns it found no GPU

import torch

from fake_trainer import module_of


class _TokenSet(torch.utils.data.Dataset):
    """Random token sequences with a label that depends on them (so the loss moves)."""

    def __init__(self, n, generator):
        self.ids = torch.randint(1, 50, (n, 6), generator=generator)
        self.labels = (self.ids[:, 0] > 25).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(6, dtype=torch.long),
                "labels": self.labels[i]}


def _averaging_callback(step_delay):
    import transformers as tf
    from safetensors.torch import load_file
    from torch.optim.swa_utils import AveragedModel

    class Averaging(tf.TrainerCallback):
        def __init__(self):
            self.average, self.steps = None, []

        def on_step_end(self, args, state, control, **kwargs):
            if step_delay > 0:
                time.sleep(step_delay)

        def on_save(self, args, state, control, **kwargs):
            if self.steps and self.steps[-1] == state.global_step:
                return
            path = os.path.join(args.output_dir, "checkpoint-%d" % state.global_step, "model.safetensors")
            model = module_of(load_file(path))
            if self.average is None:
                self.average = AveragedModel(model)
            self.average.update_parameters(model)
            self.steps.append(state.global_step)

        def tensors(self):
            return {k: v.detach().clone().contiguous() for k, v in self.average.module.state_dict().items()}
    return Averaging()


def train(output_dir, max_steps, keep, save_steps=1, step_delay=0.0, seed=0):
    """Runs the Trainer; returns the averaging callback (its .steps and .tensors())."""
    import transformers as tf
    tf.set_seed(seed)
    config = tf.BertConfig(vocab_size=50, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=16, max_position_embeddings=8, type_vocab_size=1, num_labels=2)
    model = tf.BertForSequenceClassification(config)
    train_set = _TokenSet(32, torch.Generator().manual_seed(seed + 1))
    args = tf.TrainingArguments(
        output_dir=output_dir, max_steps=max_steps, per_device_train_batch_size=4, learning_rate=0.05,
        save_strategy="steps", save_steps=save_steps, save_total_limit=keep, logging_strategy="no",
        report_to=[], disable_tqdm=True, use_cpu=True, seed=seed, dataloader_num_workers=0)
    averaging = _averaging_callback(step_delay)
    trainer = tf.Trainer(model=model, args=args, train_dataset=train_set, callbacks=[averaging])
    trainer.remove_callback(tf.trainer_callback.PrinterCallback)
    tf.utils.logging.disable_progress_bar()  # save_pretrained's "Writing model shards"
    trainer.train()
    return averaging


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--output-dir", required=True, help="the Trainer's output_dir (checkpoint-N/ inside)")
    p.add_argument("--max-steps", type=int, default=8)
    p.add_argument("--save-steps", type=int, default=1)
    p.add_argument("--keep", type=int, default=2, help="save_total_limit")
    p.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep at each step's end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reference", required=True, help="safetensors of the average; FILE.json beside it")
    return p


def main(argv):
    args = parser().parse_args(argv)
    from safetensors.torch import save_file
    averaging = train(args.output_dir, args.max_steps, args.keep, args.save_steps, args.step_delay, args.seed)
    save_file(averaging.tensors(), args.reference)
    kept = sorted((n for n in os.listdir(args.output_dir) if n.startswith("checkpoint-")),
                  key=lambda n: int(n.split("-")[1]))
    with open(args.reference + ".json", "w") as f:
        json.dump({"steps": averaging.steps, "n": len(averaging.steps), "kept": kept}, f)


if __name__ == "__main__":
    main(sys.argv[1:])
