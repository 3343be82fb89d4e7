"""Without --config_file, a --model_dir that holds a run of the program is that run's config
(its config.yaml, --params_override on top): `--model_dir=RUN --mode=eval` evaluated the
schema's defaults (another model: refused) or, with the config file but not the training's
overrides, printed every override as a change and prepared the data again."""
import os

import pytest
import tf_keras
import yaml

from recipes.common import driver
from recipes.common import flags as flags_lib
from recipes.resnet.config import ResNetConfig

TRAINED = ("train.steps=2,train.checkpoint_every=1,optimizer.warmup_steps=1,"
           "export.enabled=false,optimizer.learning_rate=0.02,train.seed=7")


def _options(model_dir, mode, config_files=(), params_override=""):
    return flags_lib.RunOptions(
        config_files=config_files, params_override=params_override, model_dir=model_dir,
        mode=mode, tpu="", strategy="", communication="auto", deterministic=False)


def test_a_directory_without_a_run_or_with_another_programs_run_gives_the_defaults(tmp_path):
    from recipes.resnet.train import ResNetClassification

    assert driver.runs_own_config(ResNetClassification, _options(str(tmp_path), "eval")) == ()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"data": {"corpus": "stdlib"}}))
    assert driver.runs_own_config(ResNetClassification, _options(str(tmp_path), "eval")) == ()
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"train": {"steps": 5}}))
    assert driver.runs_own_config(ResNetClassification, _options(str(tmp_path), "eval")) == (
        str(tmp_path / "config.yaml"),)
    given = _options(str(tmp_path), "eval", config_files=("configs/resnet/tiny_cpu.yaml",))
    assert driver.runs_own_config(ResNetClassification, given) == ()  # the files given win


@pytest.mark.slow  # a tiny ResNet run, then its evaluation
def test_a_run_is_evaluated_from_its_model_dir_alone(tmp_path, capsys):
    from recipes.resnet.train import ResNetClassification

    model_dir = str(tmp_path / "run")
    driver.run(ResNetClassification, _options(model_dir, "train",
                                              ("configs/resnet/tiny_cpu.yaml",), TRAINED))
    capsys.readouterr()
    tf_keras.backend.clear_session()
    results = driver.run(ResNetClassification, _options(model_dir, "eval"))
    out = capsys.readouterr().out
    config_lines = [line for line in out.splitlines() if line.startswith("config: ")]
    assert config_lines == [f"config: the run's own {os.path.join(model_dir, 'config.yaml')} "
                            "(no --config_file given)"], out
    assert "restored " in out and results["top_1_accuracy"] >= 0
    saved = yaml.safe_load(open(os.path.join(model_dir, "config.yaml"), encoding="utf-8"))
    assert saved["optimizer"]["learning_rate"] == 0.02 and saved["train"]["seed"] == 7
    assert ResNetConfig().train.seed != 7  # (so the defaults would have shown changes)


def test_the_outputs_line_names_the_earlier_configs_a_changed_resume_kept(tmp_path):
    """A resume with a changed config keeps the old one as config.<n>.yaml, which the
    "outputs in" line left out."""
    (tmp_path / "checkpoints").mkdir()
    for name in ("config.yaml", "config.2.yaml", "config.10.yaml", "config.1.yaml",
                 "config.notes.yaml"):
        (tmp_path / name).write_text("{}\n")
    assert driver.outputs_present(str(tmp_path)) == [
        "checkpoints", "config.yaml (earlier: config.1.yaml, config.2.yaml, config.10.yaml)"]
    for name in ("config.2.yaml", "config.10.yaml", "config.1.yaml"):
        (tmp_path / name).unlink()
    assert driver.outputs_present(str(tmp_path)) == ["checkpoints", "config.yaml"]
    (tmp_path / "labels.json").write_text("[]\n")  # a classification fine-tuning's labels
    assert driver.outputs_present(str(tmp_path)) == ["checkpoints", "config.yaml", "labels.json"]


def test_a_refused_run_of_its_own_config_prints_only_the_refusal(tmp_path, capsys):
    """The "config: the run's own ..." line came before the checks: a refused evaluation
    printed two lines for one mistake."""
    from recipes.common.errors import UserError
    from recipes.resnet.train import ResNetClassification

    with open("configs/resnet/tiny_cpu.yaml", encoding="utf-8") as f:
        (tmp_path / "config.yaml").write_text(f.read())
    with pytest.raises(UserError, match="checkpoint"):  # none to evaluate
        driver.run(ResNetClassification, _options(str(tmp_path), "eval"))
    assert capsys.readouterr().out == ""
