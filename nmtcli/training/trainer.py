"""The training loop of sec. 5: Adam, warmup schedule, label smoothing, token-budget batches, checkpoints.

It runs as one process or as one rank of a torchrun job (`training/distributed.py`) and writes a run dir
(`training/rundir.py`). Running again on the same dir resumes from the newest complete checkpoint; the
order of batches, the dropout masks, the optimizer, the loss scale and early stopping continue exactly
where they stopped.

Top to bottom: `__init__` builds the run (training/plan.py decides, training/build.py builds), `train_step` is one
optimizer step (learning rate, each batch's forward and backward, Adam), `_loop` the loop (log, validate, save, stop).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nmtcli import faults
from nmtcli.data.batching import BatchStream
from nmtcli.data.prepare import read_manifest
from nmtcli.device import OUT_OF_MEMORY, resolve_device
from nmtcli.errors import NmtError
from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import Transformer
from nmtcli.training import build, compiling, distributed, flops, precision, rundir
from nmtcli.training.early_stopping import resets_patience
from nmtcli.training.finetune import InitModel, check_data
from nmtcli.training.loader import StepBatches, StepLoader
from nmtcli.training.loss import LossWatch, output_loss, perplexity
from nmtcli.training.metrics import MetricsLog
from nmtcli.training.schedule import inverse_sqrt_lr, peak_scale
from nmtcli.training.plan import plan_run, trained_config
from nmtcli.training.settings import TrainSettings, step_floor
from nmtcli.training.validation import BleuSettings, bleu_values, valid_loss, valid_sets

# Events: on_event(kind, values) with kind in {"batch_tokens_lowered", "start", "cuda_graphs_off", "step", "overflow", "log",
# "unigram_level", "valid", "best", "checkpoint", "early_stop", "time_limit", "done"}.
OnEvent = Callable[[str, dict[str, Any]], None]

# In a run of several ranks, rank 0's clock (--max-time, --save-every in minutes) is shared every this
# many steps: the all-reduce that shares it waits for the device, so not every step.
CLOCK_EVERY = 10
# Where steps are slow (base on a CPU: a minute a step), a log line at least this often, so that a run shows its pace.
LOG_SECONDS = 30.0


@dataclass
class _Window:
    """The steps since the last log line: their loss and nll summed on the device (read only at the log
    line), their target tokens and FLOPs, and when its training time started."""

    loss: torch.Tensor  # float64 (loss_sum, nll_sum)
    tokens: int = 0
    flops: float = 0.0
    start: float = field(default_factory=time.perf_counter)

    def add(self, m: dict[str, Any]) -> None:
        self.loss += torch.stack([m["loss_sum"], m["nll_sum"]]).double()
        self.tokens += m["target_tokens"]
        self.flops += m["flops"]

    def restart(self) -> None:
        self.tokens, self.flops = 0, 0.0
        self.loss.zero_()
        self.start = time.perf_counter()


class Trainer:
    """One run in a run dir: the model, the optimizer and the position in the data, new or resumed.
    `run()` trains until --max-steps, --max-time or early stopping."""

    def __init__(
        self,
        run_dir: Path,
        data_dir: Path,
        model_config: ModelConfig,
        settings: TrainSettings,
        restart: bool = False,
        on_event: OnEvent | None = None,
        ranks: distributed.Ranks | None = None,
        init: InitModel | None = None,
        shape_classes: bool | None = None,
        graph_backend=None,
    ):
        self.run_dir = Path(run_dir)
        self.data_dir = Path(data_dir)
        self.on_event = on_event or (lambda kind, values: None)
        self.ranks = ranks or distributed.from_environment()
        self.is_main = self.ranks.is_main
        device = resolve_device(settings.device, self.ranks.local_rank)
        distributed.init(self.ranks, device)
        manifest = read_manifest(data_dir)
        self.src_lang, self.tgt_lang = manifest["source_lang"], manifest["target_lang"]
        if init is not None:  # --init: the model's config as it is, on data in its token ids
            check_data(init, manifest, self.data_dir)
        config = trained_config(model_config, manifest, init)
        self.run_config = rundir.run_config(config, settings, self.data_dir, manifest, init)
        resume, previous = build.resume_point(self.run_dir, restart, self.ranks, self.run_config, config, settings)
        self.train_data, self.valid_data = build.parallel_data(self.data_dir, manifest, config)

        # Everything decided, once (training/plan.py); what follows builds it (training/build.py).
        self.plan = plan = plan_run(settings, config, self.train_data, device, self.ranks.world_size, previous, self.run_dir,
                                    shape_classes)
        self.settings, self.config, self.device, self.batch = plan.settings, plan.config, plan.device, plan.batch
        self.shape_classes, self.update_freq, self.steps_per_epoch = plan.shape_classes, plan.update_freq, plan.steps_per_epoch
        self.mean_batch_tokens = plan.batch.mean_target_tokens
        self.run_config["training"]["max_steps"] = plan.settings.max_steps
        self.precision = precision.build(plan.precision, device)

        self.model = build.new_model(config, settings.seed, init if not resume else None, device)
        self.optimizer = build.adam(self.model, settings)
        if resume:  # weights, optimizer and loss scale as the checkpoint left them
            build.restore(resume, previous, self.model, self.optimizer, self.precision.scaler)
        self.step, self.best, self.bad_validations, self.patience_from = build.progress(previous)
        self.resumed_from: Path | None = resume
        self.stream = BatchStream(self.train_data, plan.batch.batch_tokens, settings.seed, plan.shape_classes)
        if previous:
            self.stream.load_state_dict(previous["stream"])
        self.data_state = self.stream.state_dict()
        self._saving = rundir.BackgroundSave()
        self.loss_watch = LossWatch()

        # bf16-master: a bf16 copy trains and the fp32 model holds the optimizer's master weights; otherwise
        # the model trains itself. Made after the checkpoint is loaded, from the fp32 weights it holds.
        self.masters = precision.MasterWeights(self.model) if self.precision.master_weights else None
        self.train_model: Transformer = self.masters.working if self.masters else self.model
        self.ddp, self.forward_model = build.forward_model(self.train_model, plan.compile, self.ranks, device, self.run_dir)
        self.compiled_classes = plan.compile == "classes"  # the whole forward, one graph a class (warm_up)
        self._warm = False
        # --cuda-graphs: the step replayed from CUDA graphs (training/graphs.py); `graph_backend` stands in for
        # CUDA's capture (the tests' CPU recorder).
        self.graphs = build.training_graphs(self.settings, self.precision.label, self.shape_classes, self.ranks.world_size, self.device,
                                            graph_backend, lambda src, tgt_in, tgt_out: self._losses(src, tgt_in, tgt_out, None),
                                            self.train_model, self.optimizer, self.masters, self._graphs_off)
        self.peak = flops.device_peak_flops(self.device, self.precision.name, settings.peak_tflops)
        if settings.valid_bleu:
            from nmtcli.inference.tokenizer import load_tokenizer

            # The data dir's tokenizer: nmt's sentencepiece model, or the one --vocab-from copied (Marian's).
            self.sp = load_tokenizer(self.data_dir, {"tokenizer": manifest.get("tokenizer"), "model": self.config.to_dict()})
            self.valid_sets = valid_sets(self.sp, manifest, self.data_dir, self.src_lang, self.tgt_lang)

    def _graphs_off(self, reason: str, running: bool) -> None:
        """The step graphs refused (`running` False: before the first step) or turned off after the step that failed."""
        self.on_event("cuda_graphs_off", {"step": self.step + (1 if running else 0), "reason": reason})

    # --- one step --------------------------------------------------------------------------------

    def _dropout_seed(self, batch_index: int) -> int:
        """Dropout masks are a pure function of (seed, step, batch of the step): resuming needs no RNG
        state, and N ranks draw exactly the masks one process draws for the same global batch."""
        return int(np.random.SeedSequence([self.settings.seed, self.step, batch_index]).generate_state(1)[0])

    def train_step(self, step_batches: StepBatches) -> dict[str, Any]:
        """One optimizer step over this rank's batches; the loss is divided by the whole step's target tokens.

        Nothing in it waits for the device (tests/test_gpu_paths.py records its ops), but fp16's loss scale.
        With --cuda-graphs (while they are on) the same step is replayed from CUDA graphs (`self.graphs`).
        """
        self.train_model.train()
        s = self.settings
        d_model = self.config.d_model
        lr = inverse_sqrt_lr(self.step + 1, d_model, s.warmup, s.lr_scale * peak_scale(d_model, s.warmup, s.lr))
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        # DDP averages gradients over ranks; scaling by world_size makes that a sum over the step.
        factor = self.ranks.world_size / step_batches.target_tokens
        if self.graphs is not None and self.graphs.enabled:
            seeds = [self._dropout_seed(step_batches.first_index + i) for i in range(len(step_batches.batches))]
            loss_sum, nll_sum = self.graphs.step(step_batches.batches, factor, lr, seeds)
            skipped = False
        else:
            loss_sum, nll_sum, skipped = self._eager_step(step_batches, factor)
        self.data_state = step_batches.stream_state
        if not skipped:
            self.step += 1
        scaler = self.precision.scaler
        return {
            "loss_sum": loss_sum,
            "nll_sum": nll_sum,
            "target_tokens": step_batches.target_tokens,
            "flops": flops.training_flops(self.config, step_batches.lengths),
            "lr": lr,
            "skipped": skipped,
            "loss_scale": scaler.get_scale() if scaler.is_enabled() else None,  # fp16 has waited for the device already
        }

    def warm_up(self) -> None:
        """--compile with shape classes: the forward and backward of every class the data has compiled now (once a
        run), so that no step compiles; the gradients it leaves are dropped."""
        if not self.compiled_classes or self._warm:
            return
        classes, started = self.stream.classes_present(), time.perf_counter()
        self.train_model.train()

        def step(src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor) -> None:
            loss, _ = self._losses(src.to(self.device), tgt_in.to(self.device), tgt_out.to(self.device), None)
            loss.backward()

        compiling.warm_up(step, classes, self.config.pad_id, self.config.bos_id, self.config.eos_id)
        for p in self.train_model.parameters():
            p.grad = None
        self._warm = True
        self.on_event("compiled", {"classes": len(classes), "seconds": time.perf_counter() - started})

    def _eager_step(self, step_batches: StepBatches, factor: float) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """The step's batches and Adam, launched op by op: (loss sum, NLL sum, whether fp16 skipped the step)."""
        if self.masters is None:  # the masters' gradients are overwritten by the first batch instead
            self.optimizer.zero_grad(set_to_none=True)
        scaler = self.precision.scaler
        loss_sum = torch.zeros((), device=self.device)
        nll_sum = torch.zeros((), device=self.device)
        last = len(step_batches.batches) - 1
        for i, batch in enumerate(step_batches.batches):
            torch.manual_seed(self._dropout_seed(step_batches.first_index + i))
            # Gradients are exchanged once per step, after the last batch, not after every batch.
            sync = self.ddp.no_sync() if self.ddp is not None and i < last else contextlib.nullcontext()
            with sync:
                loss, nll = self._losses(batch.src, batch.tgt_in, batch.tgt_out, batch.target_tokens)
                scaler.scale(loss * factor).backward()
            # bf16-master: the gradients are summed in fp32 over the step's batches; with several ranks they
            # stay in bf16 until the last batch, whose backward all-reduces what the batches accumulated.
            if self.masters is not None and (self.ddp is None or i == last):
                self.masters.gradients_to_masters(first=i == 0 or self.ddp is not None)
            loss_sum += loss.detach()
            nll_sum += nll
        skipped = self.precision.step(self.optimizer)  # fp16: skipped when a gradient is inf/nan
        if self.masters is not None:
            self.masters.masters_to_working()
        return loss_sum, nll_sum, skipped

    def _losses(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                tokens: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch's forward pass and its label-smoothed loss and NLL, summed over its `tokens` real targets; None:
        every target row kept, padding weighted 0 (a CUDA graph's shapes cannot follow the batch's values)."""
        model = self.train_model
        output = model.embedding.tokens.weight  # the pre-softmax projection shares it (sec. 3.4)
        with self.precision.training_autocast():
            hidden = self.forward_model(src, tgt_in, hidden=True)
            return output_loss(hidden, output, model.final_logits_bias, tgt_out, self.settings.label_smoothing,
                               self.config.pad_id, tokens, every_row=tokens is None)

    def validate(self) -> dict[str, float]:
        """Valid perplexity, and with --valid-bleu the BLEU of the first lines of the valid split (training/validation.py)."""
        s = self.settings
        values = valid_loss(self.model, self.valid_data, s.batch_tokens, self.precision.autocast, self.device, self.ranks)
        if s.valid_bleu:
            values.update(bleu_values(self.model, self.sp, self.valid_sets, BleuSettings(lines=s.valid_bleu), self.precision.autocast,
                                      self.device, self.ranks))
        return values

    def _improved(self, values: dict[str, float]) -> bool:
        """Track the best validation (BLEU if computed, else perplexity); count validations without progress."""
        metric = "valid_bleu" if "valid_bleu" in values else "valid_nll"
        if metric not in values:
            return False
        value = values[metric]
        fresh = self.best is None or self.best["metric"] != metric
        better = fresh or (value > self.best["value"] if metric == "valid_bleu" else value < self.best["value"])
        if better:
            self.best = {"metric": metric, "value": value, "step": self.step}
        # Patience is reset only by progress beyond noise (early_stopping.py); a smaller gain is still the best kept.
        if resets_patience(metric, value, None if fresh else self.patience_from, self.settings.min_delta):
            self.patience_from = value
            self.bad_validations = 0
        else:
            self.bad_validations += 1
        return better

    # --- checkpoints -----------------------------------------------------------------------------

    def save_checkpoint(self, background: bool = False) -> Path | None:
        """Write checkpoints/<step>/ as a whole (rank 0; `rundir.save_checkpoint`); returns its path.

        Every rank takes part: the ranks' weight fingerprints are compared, and a divergence is an error.
        With `background`, rank 0 takes a snapshot and a thread writes it while training goes on
        (`_saving`: collected by `_collect_save`, which the loop calls each step); returns None.
        """
        fingerprints = distributed.agreed_fingerprints(self.model, self.step) if self.ranks.distributed else None
        if not self.is_main:
            return None
        info = {"model": self.config.to_dict(), "step": self.step, "world_size": self.ranks.world_size}
        if fingerprints:
            info["rank_fingerprints"] = fingerprints
        state = {
            "step": self.step,
            "optimizer": self.optimizer.state_dict(),
            "stream": self.data_state,
            "scaler": self.precision.scaler.state_dict(),
            "best": self.best,
            "bad_validations": self.bad_validations,
            "patience_from": self.patience_from,
            "batches_per_step": self.ranks.world_size * self.update_freq,
            "batch_tokens": self.batch.batch_tokens,
        }
        # A run that validates BLEU is averaged where it scored best (`nmt average`): those checkpoints stay.
        best_step = self.best["step"] if self.best and self.best["metric"] == "valid_bleu" else None
        weights, keep_last = self.model.state_dict(), self.settings.keep_last
        if not background:
            return rundir.save_checkpoint(self.run_dir, self.step, weights, info, state, keep_last, best_step)
        weights, state, step = rundir.copied(weights), rundir.copied(state), self.step
        self._saving.start(step, lambda: rundir.save_checkpoint(self.run_dir, step, weights, info, state, keep_last, best_step))
        return None

    def _collect_save(self, wait: bool) -> None:
        """Announce a background checkpoint once it is written (`wait`: wait for it); raise its error."""
        saved = self._saving.collect(wait)
        if saved is not None:
            self.on_event("checkpoint", {"step": saved[0], "path": str(saved[1])})

    def save_best(self) -> Path:
        """checkpoints/best/: the weights of the best validation so far."""
        return rundir.save_best(self.run_dir, self.step, self.model.state_dict(), self.config, self.best)

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        s = self.settings
        if self.is_main:
            if self.resumed_from is None:
                self.run_config["training"]["resolved_update_freq"] = self.update_freq
                self.run_config["training"]["world_size"] = self.ranks.world_size
            rundir.start(self.run_dir, self.data_dir, None if self.resumed_from else self.run_config)
        metrics = MetricsLog(self.run_dir, self.step, enabled=self.is_main)
        pad_length = compiling.bucket_length if s.compile else None  # few shapes, few compiled graphs
        loader = StepLoader(self.stream, self.update_freq, self.ranks.rank, self.ranks.world_size, self.device,
                            pad_length=pad_length)
        if self.batch.lowered_from is not None:
            self.on_event("batch_tokens_lowered", {
                "batch_tokens": self.batch.batch_tokens, "requested": self.batch.lowered_from,
                "world_size": self.ranks.world_size, "tokens_per_step": s.tokens_per_step,
                "step_target_tokens_before": round(self.batch.unlowered_step_tokens or 0),
            })
        self.on_event("start", {
            "step": self.step,
            "max_steps": s.max_steps,
            "parameters": self.model.num_parameters(),
            "device": str(self.device),
            "precision": self.precision.label,
            "compile": s.compile,
            "cuda_graphs": self.graphs is not None,
            "resumed_from": str(self.resumed_from) if self.resumed_from else None,
            "init": (self.run_config.get("init") or {}).get("model"),
            "train_pairs": len(self.train_data),
            "epochs": s.epochs,
            "steps_per_epoch": self.steps_per_epoch,
            "step_floor": step_floor(s),
            "patience": s.patience,
            "valid_every": s.valid_every,
            **self.batch.describe(self.ranks.world_size, s.tokens_per_step),
        })
        try:
            self.warm_up()
            return self._loop(loader, metrics)
        except BaseException:
            with contextlib.suppress(Exception):  # the error that stopped training is the one to report
                self._collect_save(wait=True)  # never exit with a checkpoint half written by our own thread
            raise
        finally:
            loader.close()
            metrics.close()

    def _loop(self, loader: StepLoader, metrics: MetricsLog) -> dict[str, Any]:
        """Steps until --max-steps, --max-time or early stopping; logs, validates and saves on the way."""
        s = self.settings
        save_steps, save_minutes = s.save_interval()
        window = _Window(torch.zeros(2, dtype=torch.float64, device=self.device))
        last_save = window.start
        last: dict[str, Any] = {}
        stop = False
        started = time.perf_counter()
        first_step = self.step + 1  # logged whatever log_every says: a run shows it is training at once
        out_of_time = False
        while self.step < s.max_steps and not stop and not out_of_time:
            m = self._next_step(loader)
            self._collect_save(wait=False)
            window.add(m)
            if m["skipped"]:
                self.on_event("overflow", {"step": self.step, "loss_scale": m["loss_scale"]})
                continue
            if self.precision.name != "fp16":  # fp16 skips steps whose gradients overflow instead
                self.loss_watch.watch(m["loss_sum"], self.step)
            self.on_event("step", {"step": self.step, "lr": m["lr"]})  # no loss: reading it would wait for the device
            save_due = False
            if (s.max_time or save_minutes) and (not self.ranks.distributed or self.step % CLOCK_EVERY == 0):
                out_of_time, save_due = self._read_clock(started, last_save, save_minutes)
            last_step = self.step == s.max_steps or out_of_time
            due = save_due if save_minutes else self.step % save_steps == 0
            # A log line every log_every steps, and at the run's first step and LOG_SECONDS after the last line where steps
            # are slow (one process: ranks would disagree on the clock, and a line reads the losses of all of them).
            log_due = self.step % s.log_every == 0 or last_step or self.step == first_step or (
                not self.ranks.distributed and time.perf_counter() - window.start >= LOG_SECONDS)
            if last_step or due or log_due or self.step % s.valid_every == 0:
                self.loss_watch.check()  # the host waits for the device here anyway
            if log_due:
                last = self._log(m, window, metrics)
            if self.step % s.valid_every == 0 or last_step:
                self._collect_save(wait=True)  # a failed save stops the run before it validates (and writes best/)
                stop = self._validate_and_log(metrics, last)
                window.start = time.perf_counter()  # validation time is not training throughput
            if due or stop or last_step:
                # Saves in the run are written in the background, the last one before the run ends; the
                # time the training thread spends on them is no training throughput.
                paused = time.perf_counter()
                self._collect_save(wait=True)  # one at a time
                path = self.save_checkpoint(background=not (stop or last_step))
                last_save = time.perf_counter()
                window.start += last_save - paused
                if path is not None:
                    self.on_event("checkpoint", {"step": self.step, "path": str(path)})
        return self._finish(last, stop, out_of_time)

    def _next_step(self, loader: StepLoader) -> dict[str, Any]:
        try:
            faults.point("train-step", step=self.step + 1)
            return self.train_step(next(loader))
        except OUT_OF_MEMORY:
            raise NmtError(
                f"out of GPU memory at step {self.step + 1} with batches of up to {self.batch.batch_tokens:,} tokens",
                "lower --batch-tokens; --tokens-per-step keeps the step's size by accumulating more batches",
            ) from None

    def _read_clock(self, started: float, last_save: float, save_minutes: float | None) -> tuple[bool, bool]:
        """(--max-time is reached, a checkpoint is due by --save-every in minutes).

        Rank 0's clock decides both time limits, shared in one all-reduce, so that every rank stops
        after the same step and joins the same saves (a save compares weights).
        """
        s = self.settings
        now = time.perf_counter()
        mine = [float(self.is_main and s.max_time > 0 and now - started >= s.max_time * 60),
                float(self.is_main and save_minutes is not None and now - last_save >= save_minutes * 60)]
        out_of_time, save_due = (v > 0 for v in distributed.all_reduce_sum(mine, self.device))
        return out_of_time, save_due

    def _log(self, m: dict[str, Any], window: _Window, metrics: MetricsLog) -> dict[str, Any]:
        """The log line of the steps since the last one (losses summed over ranks); starts a new window."""
        elapsed = time.perf_counter() - window.start
        loss_total, nll_total = distributed.all_reduce_sum(window.loss.tolist(), self.device)
        nll = nll_total / window.tokens
        line = {
            "step": self.step,
            "epoch": self.data_state["epoch"],
            "loss": round(loss_total / window.tokens, 4),
            "nll": round(nll, 4),
            "ppl": round(perplexity(nll), 3),
            "lr": m["lr"],
            "target_tokens_per_s": round(window.tokens / elapsed, 1),
        }
        if self.peak:
            line["mfu"] = round(flops.mfu(window.flops, elapsed, self.peak, self.ranks.world_size), 4)
        if m["loss_scale"] is not None:
            line["loss_scale"] = m["loss_scale"]
        metrics.write("train", line)
        self.on_event("log", line)
        data, cfg = self.train_data.tgt, self.config
        level = self.loss_watch.still_unigram(nll, self.step, self.settings.warmup, data.tokens, len(data), cfg.vocab_size, cfg.eos_id)
        if level is not None:
            self.on_event("unigram_level", {"step": self.step, "nll": round(nll, 4), "unigram_nll": round(level, 4),
                                            "warmup": self.settings.warmup})
        window.restart()
        return line

    def _validate_and_log(self, metrics: MetricsLog, last: dict[str, Any]) -> bool:
        """Validate, keep the best weights, add the values to the last log line `last`; True: stop early."""
        s = self.settings
        values = self.validate()
        valid = {"step": self.step, **{k: round(v, 4) for k, v in values.items()}}
        if self._improved(values):
            valid["best"] = True
            if self.is_main:
                self.on_event("best", {"step": self.step, "path": str(self.save_best()), **self.best})
        metrics.write("valid", valid)
        self.on_event("valid", valid)
        last.update(valid)
        if s.patience and self.bad_validations >= s.patience:
            best = self.best or {}
            self.on_event("early_stop", {"step": self.step, "patience": s.patience, "metric": best.get("metric"),
                                         "value": best.get("value"), "best_step": best.get("step")})
            return True
        return False

    def _finish(self, last: dict[str, Any], stop: bool, out_of_time: bool) -> dict[str, Any]:
        if out_of_time:
            self.on_event("time_limit", {"step": self.step, "minutes": self.settings.max_time})
        done = {"step": self.step, "run_dir": str(self.run_dir), "early_stopped": stop, "time_limit_reached": out_of_time,
                **{k: v for k, v in last.items() if k not in ("step", "best")}}
        if self.best:
            done["best"] = self.best
        if self.graphs is not None:
            done["cuda_graphs"] = self.graphs.summary()
        self.on_event("done", done)
        return done
