"""Template `axolotl` (built-in trainer): interrupted and restarted, it ends where an
uninterrupted run ends, bit for bit; bad input is a clear message, never a traceback."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("peft")
safetensors_torch = pytest.importorskip("safetensors.torch")
torch = pytest.importorskip("torch")

from lowcostgpu.sdk.integrations import EXIT_INTERRUPTED  # noqa: E402
from lowcostgpu.sdk.integrations.hf import checkpoint_step, latest_complete_checkpoint  # noqa: E402
from lowcostgpu.sdk.testing import FakeMetadata  # noqa: E402
from lowcostgpu.templates.axolotl import main  # noqa: E402
from lowcostgpu.templates.axolotl.config import EXAMPLES_DIR  # noqa: E402
from lowcostgpu.templates.axolotl.run import PLUGIN, axolotl_config  # noqa: E402

MAX_STEPS = 24
SAVE_STEPS = 5
CORPUS = EXAMPLES_DIR / "tiny-corpus.txt"
LOSS_LINE = re.compile(r"^step (\d+) loss (\S+)$", re.MULTILINE)


@pytest.fixture(autouse=True)
def restore_sigterm() -> Iterator[None]:
    """In-process runs install the template's SIGTERM handler: take it out again."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def write_config(path: Path, **overrides: Any) -> Path:
    config: dict[str, Any] = {
        "base_model": "tiny-random",
        "adapter": "lora",
        "lora_r": 4,
        "lora_alpha": 8,
        "lora_dropout": 0.1,  # dropout draws random numbers: the RNG restore is exercised
        "lora_target_modules": ["q_proj", "v_proj"],
        "sequence_len": 32,
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 2,
        "max_steps": MAX_STEPS,
        "learning_rate": 0.01,
        "datasets": [{"path": str(CORPUS), "type": "completion"}],
        "output_dir": "run",
        "save_steps": SAVE_STEPS,
        "seed": 3,
        "flash_attention": True,  # an axolotl key the built-in trainer ignores (and says so)
    }
    config.update(overrides)
    path.write_text(yaml.safe_dump(config))
    return path


def run_template(
    config: Path, env: dict[str, str], signal_on: str | None = None, sig: int = signal.SIGTERM
) -> tuple[int, str]:
    """The template in its own process group; `sig` to the group when `signal_on` is printed."""
    command = [sys.executable, "-m", "lowcostgpu.templates.axolotl", "--config", str(config)]
    command += ["--builtin", "--step-delay-s", "0.25"]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **env},
        start_new_session=True,
    )
    watchdog = threading.Timer(300, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if signal_on is not None and line.startswith(signal_on + " loss "):
                os.killpg(proc.pid, sig)
                signal_on = None
        returncode = proc.wait()
    finally:
        watchdog.cancel()
    assert signal_on is None, f"the run never printed the trigger line:\n{''.join(lines)[-3000:]}"
    return returncode, "".join(lines)


def losses(text: str) -> dict[int, str]:
    return {int(step): loss for step, loss in LOSS_LINE.findall(text)}


def adapter(volume: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = safetensors_torch.load_file(
        volume / "run" / "final" / "adapter_model.safetensors"
    )
    return loaded


def test_interrupted_twice_and_killed_once_ends_bit_identical_to_an_uninterrupted_run(
    tmp_path: Path,
    metadata_server: FakeMetadata,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path / "tiny.yaml")
    monkeypatch.setenv("LOWCOSTGPU_VOLUME", str(tmp_path / "reference"))
    assert main(["--config", str(config), "--builtin"]) == 0
    reference = capsys.readouterr().out
    assert "ignoring keys the built-in trainer does not use: flash_attention" in reference
    expected_losses = losses(reference)
    assert sorted(expected_losses) == list(range(1, MAX_STEPS + 1))

    volume = tmp_path / "volume"
    env = {
        "LOWCOSTGPU_VOLUME": str(volume),
        "LOWCOSTGPU_METADATA_URL": metadata_server.url,
        "LOWCOSTGPU_TOKEN": metadata_server.token,
    }
    rng = random.Random(20260601)  # the interruption points: random, but the same every run
    printed: list[str] = []

    code, out = run_template(
        config, {**env, "LOWCOSTGPU_RESTART_COUNT": "0"}, f"step {rng.randint(3, 6)}"
    )
    printed.append(out)
    assert code == EXIT_INTERRUPTED, out
    first_stop = int(re.findall(r"checkpoint step (\d+) on volume", out)[-1])

    second = first_stop + rng.randint(2, 4)
    code, out = run_template(config, {**env, "LOWCOSTGPU_RESTART_COUNT": "1"}, f"step {second}")
    printed.append(out)
    assert code == EXIT_INTERRUPTED, out
    assert f"resumed from step {first_stop} (restart 1)" in out
    second_stop = int(re.findall(r"checkpoint step (\d+) on volume", out)[-1])

    kill_at = second_stop + rng.randint(3, 6)
    code, out = run_template(
        config, {**env, "LOWCOSTGPU_RESTART_COUNT": "2"}, f"step {kill_at}", signal.SIGKILL
    )
    printed.append(out)
    assert code == -signal.SIGKILL, out
    assert f"resumed from step {second_stop} (restart 2)" in out
    survivor = latest_complete_checkpoint(volume / "run")
    assert survivor is not None
    resume_step = checkpoint_step(Path(survivor))
    assert resume_step is not None and second_stop <= resume_step <= kill_at  # work since is lost

    for key, value in {**env, "LOWCOSTGPU_RESTART_COUNT": "3"}.items():
        monkeypatch.setenv(key, value)
    assert main(["--config", str(config), "--builtin"]) == 0
    printed.append(capsys.readouterr().out)
    assert f"resumed from step {resume_step} (restart 3)" in printed[-1]

    expected = adapter(tmp_path / "reference")
    final = adapter(volume)
    assert sorted(final) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(final[name], tensor), name
    for out in printed:  # every loss any run logged, redone steps included, is the reference's
        for step, loss in losses(out).items():
            assert loss == expected_losses[step], (step, out)
    reported = [body["step"] for body in metadata_server.posted("/checkpoint")]
    assert {first_stop, second_stop, 5, 10, 15, 20} <= set(reported)
    assert metadata_server.posted("/complete") == [{"step": MAX_STEPS}]


BAD_CONFIGS: dict[str, tuple[dict[str, Any], str]] = {
    "qlora": ({"adapter": "qlora"}, "adapter: 'qlora' is not supported"),
    "no datasets": ({"datasets": []}, "datasets must list at least one local file"),
    "missing dataset file": (
        {"datasets": [{"path": "nope.jsonl"}]},
        "dataset 'nope.jsonl' not found",
    ),
    "hub dataset type": (
        {"datasets": [{"path": str(CORPUS), "type": "sharegpt"}]},
        "dataset type 'sharegpt' is not supported",
    ),
    "negative learning rate": ({"learning_rate": -1}, "learning_rate must be a number >= 0"),
    "no length": ({"max_steps": 0, "num_epochs": 0}, "set max_steps"),
    "modules not a list": ({"lora_target_modules": {"q": 1}}, "lora_target_modules must be a list"),
    "fractional batch": ({"micro_batch_size": 1.5}, "micro_batch_size must be a whole number"),
    "unknown scheduler": ({"lr_scheduler": "sideways"}, "config rejected by transformers"),
    "modules not in the model": ({"lora_target_modules": ["wings"]}, "do not fit tiny-random"),
    "model not offline": (
        {"base_model": "no-such-org/no-such-model"},
        "base_model 'no-such-org/no-such-model' is not available offline",
    ),
}


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS.values(), ids=BAD_CONFIGS.keys())
def test_bad_config_is_a_clear_error_not_a_traceback(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    overrides: dict[str, Any],
    message: str,
) -> None:
    monkeypatch.setenv("LOWCOSTGPU_VOLUME", str(tmp_path / "volume"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = write_config(tmp_path / "bad.yaml", **overrides)

    with pytest.raises(SystemExit) as exited:
        main(["--config", str(config), "--builtin"])

    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_unknown_config_name_and_non_mapping_yaml_are_clear_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LOWCOSTGPU_VOLUME", str(tmp_path))
    (tmp_path / "list.yaml").write_text("- just\n- a list\n")
    for config, message in (
        ("no-such-example", "neither a file nor a shipped example"),
        (str(tmp_path / "list.yaml"), "must be a YAML mapping"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["--config", config, "--builtin"])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def test_local_model_directory_is_loaded_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lowcostgpu.templates.axolotl.data import byte_tokenizer
    from lowcostgpu.templates.axolotl.model import tiny_random_model

    tokenizer = byte_tokenizer()
    tiny_random_model(tokenizer, seed=1).save_pretrained(tmp_path / "my-model")
    tokenizer.save_pretrained(tmp_path / "my-model")
    monkeypatch.setenv("LOWCOSTGPU_VOLUME", str(tmp_path / "volume"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = write_config(
        tmp_path / "local.yaml", base_model=str(tmp_path / "my-model"), max_steps=2
    )

    assert main(["--config", str(config), "--builtin"]) == 0

    assert "done step 2" in capsys.readouterr().out
    assert (tmp_path / "volume" / "run" / "final" / "adapter_model.safetensors").is_file()


def test_axolotl_gets_the_volume_our_plugin_and_only_a_complete_resume_point(
    tmp_path: Path,
) -> None:
    (tmp_path / "data.jsonl").write_text('{"text": "hi"}\n')
    config = tmp_path / "user.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "base_model": "org/model",
                "adapter": "qlora",  # fine for axolotl itself: not validated by us here
                "datasets": [{"path": "data.jsonl", "type": "completion"}, {"path": "org/hub-set"}],
                "output_dir": "out",
                "plugins": ["axolotl.integrations.liger.LigerPlugin"],
                "auto_resume_from_checkpoints": True,
            }
        )
    )

    derived = axolotl_config(config, tmp_path / "vol", "/vol/out/checkpoint-40")

    assert derived["output_dir"] == str(tmp_path / "vol" / "out")
    assert derived["plugins"] == ["axolotl.integrations.liger.LigerPlugin", PLUGIN]
    assert derived["resume_from_checkpoint"] == "/vol/out/checkpoint-40"
    assert "auto_resume_from_checkpoints" not in derived  # it could pick a half-written one
    assert derived["datasets"][0]["path"] == str(tmp_path / "data.jsonl")
    assert derived["datasets"][1] == {"path": "org/hub-set"}  # a hub name stays a hub name
    assert derived["adapter"] == "qlora"
