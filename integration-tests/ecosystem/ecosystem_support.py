"""What the ecosystem tests share: the tiny local model, tokenizer and texts every job reads
(nothing comes from the Hub), and how a job runs on either side.

Assets: a word-level tokenizer wrapped in ``PreTrainedTokenizerFast`` and a 2-layer Llama with
random weights (``save_pretrained`` both, ``ASSETS/model``), and the texts in
``ASSETS/data/{train,test}.jsonl`` (``{"text": ...}`` per line), a folder that
``datasets.load_dataset`` reads as a local dataset (``trl sft --dataset_name``).

Sides: ``accel`` runs in this interpreter's venv (where accel-kit is installed, and a real
``accelerate`` too, which the alias shadows) through one of the three opt-ins; ``accelerate``
runs in the Hugging Face venv named by ``ACCEL_TEST_HF_PYTHON``. Every job gets the environment of
:func:`job_environment`: offline, one thread, a fixed hash seed, and fresh ``HF_HOME`` and
``XDG_CONFIG_HOME`` (no config file of the machine's user is read).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

JOBS = Path(__file__).parent / "jobs"
HF_PYTHON = "ACCEL_TEST_HF_PYTHON"
#: Per job (a 2-process ``Trainer`` job takes about 25 s on 2 idle cores).
JOB_TIMEOUT = 300
#: ``python -c`` program: the third opt-in (``accel.as_accelerate.install()`` before anything
#: imports ``accelerate``), then the script named by the first argument, as ``__main__``.
INSTALL_THEN_RUN = (
    "import os, runpy, sys; import accel.as_accelerate; accel.as_accelerate.install(); "
    "sys.argv = sys.argv[1:]; sys.path.insert(0, os.path.dirname(sys.argv[0])); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)
#: Launchers' variables, kept out of a job's environment (its own launcher sets them).
_LAUNCH_VARIABLES = {
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID",
}  # fmt: skip


def job_environment(home: Path, *, alias: bool) -> dict[str, str]:
    """This process's environment without launcher, accel and Accelerate variables, offline, with
    its own ``HF_HOME`` and ``XDG_CONFIG_HOME`` under ``home``; ``ACCEL_AS_ACCELERATE=1`` when
    ``alias``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _LAUNCH_VARIABLES and not key.startswith(("ACCEL_", "ACCELERATE_"))
    }
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(home / "hf-home"),
        XDG_CONFIG_HOME=str(home / "config"),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONHASHSEED="0",
        PYTHONUNBUFFERED="1",
    )
    if alias:
        env["ACCEL_AS_ACCELERATE"] = "1"
    return env


def from_accel(qualified_name: str) -> bool:
    """Whether ``module.Class`` comes from accel (``accel`` or one of its ``accel_*`` packages),
    not from Hugging Face's ``accelerate``."""
    top = qualified_name.split(".")[0]
    return top == "accel" or top.startswith("accel_")


def executable(python: str, name: str) -> str:
    """The console script ``name`` of the venv of ``python``."""
    found = shutil.which(name, path=str(Path(python).parent))
    assert found, f"no {name!r} next to {python}"
    return found


def run(command: list[str], env: dict[str, str], what: str) -> subprocess.CompletedProcess:
    """Run ``command``; fail with its output unless it exits 0."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT)
    assert done.returncode == 0, (
        f"{what} exited {done.returncode}: {' '.join(command)}\n"
        f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-8000:]}"
    )
    return done


#: Sizes the tests rely on: 26 training texts (an uneven last batch on 2 processes), 13
#: evaluation texts (4 per step on 2 processes: the last step holds 1).
TRAIN_TEXTS = 26
EVAL_TEXTS = 13
WORDS = [
    "the", "a", "one", "every", "small", "large", "red", "blue", "green", "old", "new", "quick",
    "slow", "cat", "dog", "bird", "fish", "tree", "river", "stone", "house", "road", "cloud", "sun",
    "moon", "star", "runs", "jumps", "sleeps", "sings", "flies", "swims", "sees", "finds", "holds",
    "likes", "under", "over", "near", "behind", "before", "after", "with", "without", "and", "but",
    "then", "today",
]  # fmt: skip
SPECIAL = {"pad_token": "[PAD]", "unk_token": "[UNK]", "bos_token": "[BOS]", "eos_token": "[EOS]"}


def texts(count: int, seed: int) -> list[str]:
    generator = random.Random(seed)
    return [
        " ".join(generator.choice(WORDS) for _ in range(generator.randint(4, 12)))
        for _ in range(count)
    ]


def build(root: Path) -> None:
    """Write the tokenizer and model (``root/model``) and the texts (``root/data``)."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    train, test = texts(TRAIN_TEXTS, seed=1), texts(EVAL_TEXTS, seed=2)
    data = root / "data"
    data.mkdir(parents=True)
    for name, rows in (("train", train), ("test", test)):
        lines = [json.dumps({"text": text}) for text in rows]
        (data / f"{name}.jsonl").write_text("\n".join(lines) + "\n")

    core = Tokenizer(models.WordLevel(unk_token=SPECIAL["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=list(SPECIAL.values()))
    core.train_from_iterator([" ".join(WORDS)], trainer=trainer)
    bos = core.token_to_id(SPECIAL["bos_token"])
    core.post_processor = processors.TemplateProcessing(
        single=f"{SPECIAL['bos_token']} $A", special_tokens=[(SPECIAL["bos_token"], bos)]
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, **SPECIAL)
    model_dir = root / "model"
    tokenizer.save_pretrained(model_dir)

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attention_dropout=0.1,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(model_dir)
