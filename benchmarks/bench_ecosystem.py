"""The Hugging Face stack on accel: transformers' ``Trainer`` and ``from_pretrained`` with disk
offload, run unchanged on accel through accel-kit's ``accelerate`` alias (``ACCEL_AS_ACCELERATE=1``)
against the same scripts on Hugging Face Accelerate (its own venv, same transformers).

Two random-weight Llama models are written with ``save_pretrained`` to the scratch folder
(workloads/ecosystem_make.py): a small one for the Trainer (4 layers, hidden 128, vocabulary 2000)
and one for offloading (8 layers, hidden 640, ~200 MB of float32; 4 layers, hidden 512, ~84 MB with
--quick). Every measurement runs in a fresh process; accel and Accelerate runs alternate (the order
flips every repeat) so that a machine whose load drifts favours neither, and the figures are
medians over the repeats: 3 per library (1 with --quick), 5 for the time to the first step. Each
run reports the module of the ``Accelerator`` or offload hook it used, and the section fails if a
run used the other library.

- Trainer steps/s, 2 processes (``python -m torch.distributed.run --standalone --nproc_per_node 2``
  from each venv, gloo, 1 thread each; workloads/ecosystem_trainer.py; sequence 128, batch 4 per
  process, AdamW): a ``TrainerCallback`` times, inside the script, the 35 steps after 5 warm-up
  steps (17 after 3 with --quick); it also reports rank 0's CPU time per step (process time), a
  figure that other load on the machine disturbs less than steps/s.
- Time to the first Trainer step, 1 process: from right before the parent starts the interpreter
  (``time.time()``) to the end of step 1 in the child (``time.time()`` in ``on_step_end``): imports,
  ``from_pretrained``, the Trainer's set-up and one step; also the CPU seconds the child had used by
  then (process time), less disturbed by other load.
- ``from_pretrained(device_map="auto", max_memory={"cpu": budget}, offload_folder=...)`` with most
  decoder layers on "disk" (workloads/ecosystem_offload.py): the median of 3 loads after a warm-up
  load, and greedy ``generate`` of 32 new tokens on 1 thread (tokens/s). The page cache is warm
  (the checkpoint was just written and loaded). The generated tokens must be identical across all
  runs of both libraries, else the section fails.
- The start-up hook's cost while ``ACCEL_AS_ACCELERATE`` is unset (workloads/ecosystem_hook.py,
  this interpreter's venv): ``site`` runs the ``import`` line of ``accel_kit_as_accelerate.pth`` at
  every interpreter start; ``timeit`` measures that line (``exec`` of the string, as ``site`` does)
  and the whole file (``site.addpackage``: open, read, exec), against the run-to-run spread
  (standard deviation) of ``python -c pass``: "nothing measurable" is less than that spread; for
  comparison, ``python -c pass`` with the variable set (the hook then imports accel).
"""

from __future__ import annotations

import statistics
import time

from harness import HERE, Context, Row, json_result, run_command, time_command
from hf_stack import ENVS, OFFLINE, alternate, check_library, differing_tokens_row, median_of

TITLE = (
    "Hugging Face stack on accel (ACCEL_AS_ACCELERATE=1): Trainer, from_pretrained offload, "
    "start-up hook"
)
WORKLOADS = HERE / "workloads"
NEW_TOKENS = 32


def _trainer(ctx: Context, model: str) -> tuple[dict, dict]:
    steps, warmup = (20, 3) if ctx.quick else (40, 5)
    repeats, first_step_repeats = (1, 1) if ctx.quick else (3, 5)
    script = str(WORKLOADS / "ecosystem_trainer.py")

    def two_processes(library: str, python: str, repeat: int) -> dict:
        output = str(ctx.scratch / f"trainer-{library}-{repeat}")
        torchrun = [python, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
        result = json_result(
            [*torchrun, script, model, output, str(steps), str(warmup)],
            env=ENVS[library],
            timeout=900,
        )
        check_library(library, result["accelerator"])
        if result["world_size"] != 2 or result["steps"] != steps:
            raise RuntimeError(f"{library}: expected 2 processes and {steps} steps, got {result}")
        return result

    def first_step(library: str, python: str, repeat: int) -> dict:
        output = str(ctx.scratch / f"first-step-{library}-{repeat}")
        start = time.time()
        result = json_result([python, script, model, output, "1", "0"], env=ENVS[library])
        check_library(library, result["accelerator"])
        return {"seconds": result["first_step_end"] - start, "cpu_s": result["first_step_cpu_s"]}

    return (
        alternate(ctx, repeats, two_processes),
        alternate(ctx, first_step_repeats, first_step),
    )


def _offload(ctx: Context, model: str, budget: int) -> dict:
    repeats = 1 if ctx.quick else 3
    script = str(WORKLOADS / "ecosystem_offload.py")

    def load_and_generate(library: str, python: str, repeat: int) -> dict:
        folder = str(ctx.scratch / f"offload-{library}-{repeat}")
        result = json_result(
            [python, script, model, folder, str(budget), str(NEW_TOKENS)], env=ENVS[library]
        )
        check_library(library, result["hook"])
        return result

    results = alternate(ctx, repeats, load_and_generate)
    first = results["accel"][0]
    for library, runs in results.items():
        for result in runs:
            if result["tokens"] != first["tokens"] or result["disk_layers"] != first["disk_layers"]:
                raise RuntimeError(
                    f"generated tokens or disk placement differ: accel {first['tokens']} "
                    f"({first['disk_layers']} layers on disk), {library} {result['tokens']} "
                    f"({result['disk_layers']} layers on disk)"
                )
    return results


def _start_times(python: str, starts: int) -> list[float]:
    """Wall seconds of each of ``starts`` runs of ``python -c pass`` with the variable unset."""
    times = []
    for _ in range(starts):
        began = time.perf_counter()
        run_command([python, "-c", "pass"], {"ACCEL_AS_ACCELERATE": ""})
        times.append(time.perf_counter() - began)
    return times


def run(ctx: Context) -> list[Row]:
    made = json_result(
        [
            ctx.python,
            str(WORKLOADS / "ecosystem_make.py"),
            str(ctx.scratch / "models"),
            "quick" if ctx.quick else "full",
        ],
        env=OFFLINE,
    )
    trainer, first_step = _trainer(ctx, str(ctx.scratch / "models" / "train"))
    offload = _offload(ctx, str(ctx.scratch / "models" / "offload"), made["budget"])
    hook = json_result([ctx.python, str(WORKLOADS / "ecosystem_hook.py"), "2000"])
    starts = 5 if ctx.quick else 20
    bare_runs = _start_times(ctx.python, starts)
    bare, spread = statistics.median(bare_runs), statistics.stdev(bare_runs)
    aliased = time_command([ctx.python, "-c", "pass"], starts, env={"ACCEL_AS_ACCELERATE": "1"})

    steps, hf_steps = (
        median_of(trainer, "accel", "steps_per_s"),
        median_of(trainer, "accelerate", "steps_per_s"),
    )
    cpu, hf_cpu = (
        median_of(trainer, "accel", "cpu_s_per_step"),
        median_of(trainer, "accelerate", "cpu_s_per_step"),
    )
    first, hf_first = (
        median_of(first_step, "accel", "seconds"),
        median_of(first_step, "accelerate", "seconds"),
    )
    first_cpu, hf_first_cpu = (
        median_of(first_step, "accel", "cpu_s"),
        median_of(first_step, "accelerate", "cpu_s"),
    )
    disk = offload["accel"][0]["disk_layers"]
    layers = made["offload_layers"]
    megabytes = made["offload_bytes"] / 2**20
    budget_mb = made["budget"] / 2**20
    # "nothing measurable": less than the run-to-run spread of the interpreter start it adds to
    limit_ns = spread * 1e9
    return [
        Row(
            "Trainer steps/s, 2 processes (torchrun, gloo; Llama 4 x 128, seq 128, batch 4 per "
            "process; after warm-up)",
            "steps/s",
            steps,
            hf_steps,
            None,
            ">= 1.0x Accelerate",
            None if hf_steps is None else steps >= hf_steps,
        ),
        Row(
            "same run: CPU time per step, rank 0 (process time, all threads)",
            "ms",
            cpu * 1000,
            None if hf_cpu is None else hf_cpu * 1000,
            None,
        ),
        Row(
            "interpreter start to end of first Trainer step, 1 process",
            "s",
            first,
            hf_first,
            None,
            "<= Accelerate",
            None if hf_first is None else first <= hf_first,
        ),
        Row("same run: CPU time of the process to that point", "s", first_cpu, hf_first_cpu),
        Row(
            f'from_pretrained device_map="auto", {budget_mb:.0f} MB CPU budget, {disk} of '
            f"{layers} layers on disk ({megabytes:.0f} MB model, warm page cache): load",
            "s",
            median_of(offload, "accel", "load_s"),
            median_of(offload, "accelerate", "load_s"),
            None,
        ),
        Row(
            f"same model: greedy generate, {NEW_TOKENS} new tokens, 1 thread",
            "tokens/s",
            median_of(offload, "accel", "tokens_per_s"),
            median_of(offload, "accelerate", "tokens_per_s"),
            None,
        ),
        differing_tokens_row(
            offload["accel"][0]["tokens"],
            offload["accelerate"][0]["tokens"] if "accelerate" in offload else None,
        ),
        Row("python -c pass (hook installed, ACCEL_AS_ACCELERATE unset)", "s", bare),
        Row("same: standard deviation over the starts", "s", spread),
        Row(
            "start-up hook, variable unset: the .pth line (exec of the string, as site runs it)",
            "ns per start",
            hook["exec_ns"],
            None,
            None,
            f"< the spread of python -c pass ({limit_ns:.0f} ns)",
            hook["exec_ns"] < limit_ns,
        ),
        Row(
            "start-up hook, variable unset: the whole .pth file (site.addpackage: open, read, "
            "exec)",
            "ns per start",
            hook["file_ns"],
            None,
            None,
            f"< the spread of python -c pass ({limit_ns:.0f} ns)",
            hook["file_ns"] < limit_ns,
        ),
        Row("python -c pass with ACCEL_AS_ACCELERATE=1 (the hook imports accel)", "s", aliased),
    ]
