r"""ResNet image classification with LAMB or LARS: the task the shared driver runs.

    python -m recipes.resnet.train --config_file=configs/resnet/tiny_cpu.yaml --model_dir=/tmp/rn
    python -m recipes.resnet.train --config_file=configs/resnet/resnet50_lamb_32k.yaml \
        --params_override=data.train_file_pattern=gs://b/train-*,data.eval_file_pattern=gs://b/validation-* \
        --model_dir=gs://b/runs/lamb32k --tpu=local

Flags and modes are the driver's (recipes/common/driver.py): it prints the batch plan and
which variables get weight decay and trust ratios (the full table in
<model_dir>/exclusions.txt), trains (resuming from the newest checkpoint in --model_dir),
prints held-out top-1/top-5 (top-5 only above 5 classes) and exports <model_dir>/export
(JPEG bytes in, class probabilities out).
"""

from recipes.common import startup  # before TensorFlow: legacy Keras, quiet C++
from recipes.resnet.config import ResNetConfig

if __name__ == "__main__":  # --help and flag mistakes answered before TensorFlow loads
    startup.check_command_line(ResNetConfig)

from lamb_tf import exclusions  # noqa: E402
from recipes.common import driver, schema, task  # noqa: E402
from recipes.common.errors import UserError  # noqa: E402
from recipes.resnet import data as data_lib  # noqa: E402
from recipes.resnet import export as export_lib  # noqa: E402
from recipes.resnet import input as input_lib  # noqa: E402
from recipes.resnet import model as model_lib  # noqa: E402


class ResNetClassification(task.Task):
    """Model Garden's ResNet + classification head on ImageNet-format TFRecords."""

    config_class = ResNetConfig
    # optimizer.exclude_from_weight_decay: null = MLPerf's LARS skip list (batch norm and
    # biases); the LAMB configs list [batch_normalization] explicitly, as the authors' run.
    default_exclude_from_weight_decay = exclusions.RESNET_EXCLUDE_PATTERNS
    fixed_on_resume = ("model.", "data.num_classes", "data.label_offset",  # (class ids)
                       "data.seed", "data.digits_validation_fraction")  # the digits' split
    listed_files = None  # the configured files, listed by check_data

    def check_config(self):
        config = self.config
        model_lib.check_model_config(config.model)
        schema.check_positive("data", config.data,
                              ("image_size", "num_classes", "shuffle_buffer_size"))
        if config.data.eval_num_examples < 0:
            raise UserError(f"data.eval_num_examples={config.data.eval_num_examples} must be the "
                            "number of held-out examples, or 0 to count them")
        for key in ("crop_area_min", "center_crop_fraction"):  # shares of the image
            if not 0 < getattr(config.data, key) <= 1:
                raise UserError(f"data.{key}={getattr(config.data, key)} must be above 0 and "
                                "at most 1")
        schema.check_rates("train", config.train, ("label_smoothing",))
        data_lib.check_digits_config(config.data)

    def check_data(self, mode, model_dir):
        self.listed_files = data_lib.list_data_files(self.config.data, mode)

    def prepare(self, model_dir, mode):
        self.data = data_lib.resolve_data(self.config.data, model_dir, mode, self.listed_files)
        self.told_eval_steps = False
        bfloat16 = self.config.runtime.precision == "mixed_bfloat16"
        self.image_dtype = "bfloat16" if bfloat16 else "float32"

    def build_model(self):
        config = self.config
        self.classifier = model_lib.build_model(
            config.model, config.data.num_classes, config.data.image_size
        )
        return self.classifier

    def compile_arguments(self):
        num_classes = self.config.data.num_classes
        loss = model_lib.SmoothedCrossEntropy(num_classes, self.config.train.label_smoothing)
        # weighted: the eval batches' zero-weight padding must not count as examples
        return {"loss": loss, "weighted_metrics": model_lib.metrics(num_classes)}

    def train_replica_dataset(self, input_context, plan, seed, steps_to_skip):
        # each optimizer step takes one batch per local replica from this pipeline
        replicas = input_context.num_replicas_in_sync // input_context.num_input_pipelines
        return input_lib.make_train_dataset(
            self.config.data,
            self.data.train_files,
            plan.per_replica_batch_size,
            input_context=input_context,
            skip_batches=steps_to_skip * replicas,
            dtype=self.image_dtype,
            seed=seed,
        )

    def evaluate(self, model, strategy):
        per_replica_batch = self.config.eval.global_batch_size // strategy.num_replicas_in_sync
        pipelines = input_lib.num_input_pipelines(strategy)
        pipeline_batch = per_replica_batch * (strategy.num_replicas_in_sync // pipelines)
        steps = self._eval_steps(pipeline_batch * pipelines, pipelines)
        dataset = strategy.distribute_datasets_from_function(
            lambda context: input_lib.make_eval_dataset(
                self.config.data,
                self.data.eval_files,
                per_replica_batch,
                steps,
                input_context=context,
                dtype=self.image_dtype,
                num_examples=self.data.eval_examples,
            )
        )
        self.evaluated_step = int(model.optimizer.iterations.numpy())
        results = model.evaluate(dataset, steps=steps, return_dict=True, verbose=0)
        self.evaluated_examples = model_lib.examples_counted(model)
        configured = input_lib.eval_examples_read(self.data.eval_examples, steps,
                                                  pipeline_batch, pipelines)
        if self.evaluated_examples < configured:  # a data.eval_num_examples above the files'
            print(f"data.eval_num_examples={self.data.eval_examples} is more than the held-out "
                  f"files hold: evaluated their {self.evaluated_examples:,} examples", flush=True)
        # Keras' loss is the mean over every batch slot, the zero-weight padding's too (its
        # metrics are weighted): the mean over the real examples instead.
        results["loss"] *= steps * pipeline_batch * pipelines / self.evaluated_examples
        return results

    def _eval_steps(self, global_batch, pipelines):
        """eval.steps (0: all), at most the steps that read the held-out set once."""
        whole = input_lib.eval_steps(self.data.eval_examples, global_batch, pipelines)
        steps = self.config.eval.steps
        if steps > whole and not self.told_eval_steps:  # once: train_and_eval evaluates twice
            self.told_eval_steps = True
            print(f"eval.steps={steps} is more than the {whole} step(s) of {global_batch} that "
                  f"hold the {self.data.eval_examples} held-out examples: evaluating {whole}",
                  flush=True)
        return min(steps, whole) if steps else whole

    def describe_evaluation(self, results):
        return (f"{super().describe_evaluation(results)} "  # results.json's keys and values
                f"({self.evaluated_examples:,} examples, step {self.evaluated_step})")

    def export(self, export_dir):
        export_lib.export(self.classifier, self.config.data, export_dir,
                          jpeg_only=self.config.export.jpeg_serving,
                          labels_file=self.data.labels_file)

    def input_files(self, split):
        return {"train": self.data.train_files, "eval": self.data.eval_files}.get(split, ())

    def explain_input_error(self, error, split):
        pattern = self.data.train_pattern if split == "train" else self.data.eval_pattern
        return data_lib.explain_input_error(error, pattern, self.config.data)


if __name__ == "__main__":
    driver.main(ResNetClassification)
