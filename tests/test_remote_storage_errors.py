"""A remote path (gs://) that cannot be reached or is refused: one line and exit status 2
through `recipes.common.errors.run`, as every other mistake, not TensorFlow's traceback;
any other TensorFlow error keeps its traceback."""

import types

import pytest
import tensorflow as tf

from recipes.common import errors

UNREACHABLE = ("Error executing an HTTP request: libcurl code 6 meaning 'Couldn't resolve host "
               "name', error details: Could not resolve host: storage.googleapis.com when "
               "reading metadata of gs://no-such-bucket/runs/x/params.yaml")


def _run(error, capsys):
    def main(argv):
        del argv
        raise error

    with pytest.raises(SystemExit) as exit_:
        errors.run(main)
    return exit_.value.code, capsys.readouterr().err


@pytest.fixture(autouse=True)
def _no_flags(monkeypatch):
    monkeypatch.setattr("sys.argv", ["program"])


@pytest.mark.parametrize("error", [
    tf.errors.FailedPreconditionError(None, None, UNREACHABLE),
    tf.errors.PermissionDeniedError(None, None, "Error reading gs://bucket/data/train-00000: "
                                    "403 Forbidden"),
    tf.errors.UnauthenticatedError(None, None, "gs://bucket/run/checkpoint: no credentials"),
], ids=["unreachable", "forbidden", "unauthenticated"])
def test_a_remote_path_that_cannot_be_reached_is_one_line(error, capsys):
    code, err = _run(error, capsys)
    assert code == errors.EXIT_USER_ERROR
    assert err.startswith("error: cannot reach remote storage: ") and err.count("\n") == 1, err
    assert "gs://" in err and err.rstrip().endswith("check the path, the network and the "
                                                   "credentials (gcloud auth "
                                                   "application-default login)")


@pytest.mark.parametrize("error", [
    tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2] vs. [3]"),
    tf.errors.PermissionDeniedError(None, None, "/root/run: Permission denied"),  # local
    ValueError("a bug"),
], ids=["tensorflow-error", "local-permission", "python-error"])
def test_other_errors_keep_their_traceback(error, capsys):
    def main(argv):
        del argv
        raise error

    with pytest.raises(type(error)):
        errors.run(main)


@pytest.mark.parametrize("error, words", [
    (tf.errors.FailedPreconditionError(None, None, UNREACHABLE + "\n\t when reading"),
     "cannot reach remote storage: Error executing an HTTP request"),
    (tf.errors.InternalError(None, None, "a backend error\n\tmore"),
     "config file 'gs://bucket/run.yaml' cannot be read (a backend error)"),
], ids=["unreachable", "other"])
def test_a_remote_config_file_that_cannot_be_read_is_one_line(monkeypatch, error, words):
    """Was two lines (TensorFlow's message goes on after a newline), ending in "check its
    permissions" for a host that was not reached."""
    from recipes.common import config as config_lib
    from recipes.resnet.config import ResNetConfig

    def unreadable(*args, **kwargs):
        raise error

    monkeypatch.setattr(tf.io.gfile, "GFile", unreadable)
    with pytest.raises(errors.UserError) as raised:
        config_lib.load_config(ResNetConfig, ["gs://bucket/run.yaml"])
    assert str(raised.value).startswith(words) and "\n" not in str(raised.value)


def test_a_runs_remote_config_yaml_out_of_reach_is_not_called_damaged(monkeypatch):
    """A 403 reading a gs:// run's config.yaml was "its config.yaml is damaged (...); put
    the run's config back ..., or give a new --model_dir", advice that replaces a sound run."""
    from recipes.common import checkpoints, driver
    from recipes.common import config as config_lib
    from recipes.resnet import train as resnet_train

    task = resnet_train.ResNetClassification(config_lib.load_config(resnet_train.ResNetConfig))

    def forbidden(*args, **kwargs):
        raise tf.errors.PermissionDeniedError(None, None, "gs://b/run/config.yaml: 403")

    monkeypatch.setattr(checkpoints, "latest_checkpoint", lambda model_dir: "gs://b/run/ckpt-2")
    monkeypatch.setattr(tf.io.gfile, "exists", lambda path: True)
    monkeypatch.setattr(tf.io.gfile, "GFile", forbidden)
    with pytest.raises(errors.UnreachableStorage, match=r"^cannot reach remote storage: .*403"):
        driver.check_same_program(task, "gs://b/run", "eval")
    options = types.SimpleNamespace(config_files=(), model_dir="gs://b/run")
    with pytest.raises(errors.UnreachableStorage):  # was: () (the schema's defaults)
        driver.runs_own_config(resnet_train.ResNetClassification, options)
