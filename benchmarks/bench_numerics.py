"""What the layer-by-layer comparison costs next to the passes it compares, on tiny-transformer.

    .venv/bin/python benchmarks/bench_numerics.py

The comparison of one target run is everything notebook 03 does for it with a one-step
trajectory and one held-out batch: the fp32 reference twice (first a hooked training step that
keeps every leaf's output and input, with the held-out forward before and after its update;
then an unhooked step scored only after its update, whose numbers must equal the first's), the
fp64 yardstick (a hooked training step), the target run (a hooked training step, its update and
its held-out forwards), the reproducibility check, every per-tensor metric and verdict, and the
re-runs that measure each flagged layer's own error against its precision band, and AWS's
acceptance gates: the acceptance set (held-out sequences) fed to the reference, the fp64 run and
the target, per-position KL, cosine and arg-max, the R-ratio of every layer, and convergence
parity over 3 seeds of a one-step trajectory each (the target's own; an fp32 eager run on the CPU
reuses the reference's). The plain passes are what it compares, on already built models,
nothing else: of the reference and the target, the held-out forward, one forward + loss +
backward, the optimizer update and the held-out forward again (the score after is taken at the
updated weights); of the fp64 run, one forward + loss + backward; the forward over the
acceptance set of the reference, the fp64 run and the target; and per seed one training step of
the reference and of the target. The reference's second run is not among the plain passes: its
cost shows in the ratio. Both are measured in alternating pairs (as the Dynamo harness
interleaves runs against load changes); the ratio is median comparison time / median plain
time.

Two targets bracket the cost: fp32 eager on the CPU, where no layer is flagged (no re-runs), and
bf16 autocast, where nearly every layer is flagged and re-run alone on the reference's inputs
(fp64 on those inputs and each rounding-alone result are computed once and reused by every run
of a notebook; here, with one target run, they are paid in full). Two batch sizes show how the
ratio moves with work per pass: the workload's own (8 sequences), where a training step is a
few milliseconds and the per-tensor bookkeeping weighs most, and 64.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

from workbench.numerics import acceptance
from workbench.numerics.capture import FP32, FP64, PRECISIONS, RunSpec
from workbench.numerics.records import NumericsSettings
from workbench.numerics.references import run_references
from workbench.numerics.run import compare_run
from workbench.numerics.validation import held_out_batches
from workbench.targets import get_target
from workbench.workload import load_workload, seeded

PAIRS = 15
WORKLOAD = "tiny-transformer"
BATCH_SIZES = (None, 64)  # None: the workload's own batch size
PRECISIONS_TIMED = ("fp32", "bf16-autocast")


def ratios_for(batch_size: int | None) -> dict[str, float]:
    workload = load_workload(WORKLOAD, batch_size=batch_size)
    cpu = get_target("cpu")
    initial = workload.build_model("cpu")

    def build() -> torch.nn.Module:
        return copy.deepcopy(initial)  # as run_numerics builds every run

    batch = workload.batch("cpu")
    inputs, targets = batch
    held_out = held_out_batches(workload, 1)
    # The acceptance set of a language model without generate(): the first held-out sequences.
    prompts = NumericsSettings().prompts
    acceptance_inputs = tuple(t[:prompts] for t in held_out.batches[0][0])
    seeds = [workload.seed + i for i in range(NumericsSettings().convergence_seeds)]
    ratios = {}
    for precision in PRECISIONS_TIMED:
        spec = RunSpec(cpu, PRECISIONS[precision])
        settings = NumericsSettings(
            precisions=(precision,),
            compiled_precisions=(),
            steps=1,
            validation_batches=1,
            convergence_steps=1,
        )

        def comparison(spec: RunSpec = spec, settings: NumericsSettings = settings) -> float:
            start = time.perf_counter()
            refs = run_references(build, batch, workload, 1, cpu, held_out=held_out)
            prepared = acceptance.prepare(workload, build, refs, held_out, settings)
            calls: dict = {}
            result = compare_run(spec, build, batch, refs, workload, settings, calls_out=calls)
            side = acceptance.measure_run(result, spec, build, prepared, workload, settings, refs)
            side.calls = calls
            acceptance.judge_runs(
                [result], {result.label: side}, prepared, refs, build, cpu, settings
            )
            return time.perf_counter() - start

        def plain(spec: RunSpec = spec) -> float:
            total = 0.0
            for run in (RunSpec(cpu, FP32), RunSpec(cpu, FP64), spec):
                model = run.place_model(build())
                placed = run.place(inputs)
                scored = run.precision is not FP64  # the yardstick scores no held-out data
                start = time.perf_counter()
                if scored:
                    held_out_forward(model, run)
                    model.train()
                    optimizer = workload.make_optimizer(model)
                with run.autocast():
                    loss = workload.loss_fn(model(*placed), targets)
                loss.backward()
                if scored:  # the update whose weights the held-out score after is taken at
                    optimizer.step()
                    held_out_forward(model, run)
                total += time.perf_counter() - start
            for run in (RunSpec(cpu, FP32), RunSpec(cpu, FP64), spec):
                model = run.place_model(build()).eval()
                start = time.perf_counter()
                with torch.no_grad(), run.autocast():
                    model(*run.place(acceptance_inputs))
                total += time.perf_counter() - start
            trained = (RunSpec(cpu, FP32), spec) if spec.precision is not FP32 else (spec,)
            for run in trained:
                for seed in seeds:
                    with seeded(seed):
                        model = run.place_model(workload.model_factory())
                    generator = torch.Generator().manual_seed(seed)
                    seed_inputs, seed_targets = workload.batch_maker(workload.batch_size, generator)
                    start = time.perf_counter()
                    optimizer = workload.make_optimizer(model)
                    with run.autocast():
                        loss = workload.loss_fn(model(*run.place(seed_inputs)), seed_targets)
                    loss.backward()
                    optimizer.step()
                    total += time.perf_counter() - start
            return total

        def held_out_forward(model: torch.nn.Module, run: RunSpec) -> None:
            model.eval()
            with torch.no_grad(), run.autocast():
                for held_inputs, _targets in held_out.batches:
                    model(*run.place(held_inputs))

        comparison(), plain()  # first calls pay lazy initialisation, in neither sample
        compared: list[float] = []
        plains: list[float] = []
        for pair in range(PAIRS):
            order = (comparison, plain) if pair % 2 == 0 else (plain, comparison)
            for measure in order:
                (compared if measure is comparison else plains).append(measure())
        ratio = statistics.median(compared) / statistics.median(plains)
        ratios[precision] = ratio
        print(
            f"batch {workload.batch_size}, {precision} eager: comparison median "
            f"{statistics.median(compared) * 1e3:.1f} ms, plain passes median "
            f"{statistics.median(plains) * 1e3:.1f} ms, ratio {ratio:.2f}x"
        )
    return ratios


def main() -> None:
    print(
        f"{WORKLOAD} on cpu, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"{PAIRS} alternating pairs per figure"
    )
    for batch_size in BATCH_SIZES:
        ratios = ratios_for(batch_size)
        summary = ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        size = batch_size or load_workload(WORKLOAD).batch_size
        print(
            f"overhead ratio, batch {size} (layer-by-layer comparison / plain passes, "
            f"aim <= 3x): {summary}"
        )


if __name__ == "__main__":
    main()
