"""A stand-in for a recipe CLI, for the study tool's tests: same flags, writes the driver's
results.json at once. Held-out "accuracy" peaks at learning rate 0.1 and falls with the
batch (top-5 is 0.05 above it, the loss 2 minus it); a learning rate above 0.3 diverges (the driver's one-line error, DIVERGED, exit 2;
tests/test_batch_study.py checks that it is the line the real driver prints). Each
start appends a line to <model_dir>/starts; with STUDY_FAKE_HANG_ABOVE_LR set, a run above
that learning rate hangs (the test interrupts the study there)."""
import json
import math
import os
import sys
import time

# What recipes.common.errors.run prints for the TrainingDiverged that the driver's
# CheckpointEachEpoch raises when the loss is NaN after step 3 of a run with no checkpoint.
DIVERGED = ("error: loss became nan at step 3; stopped without saving, no checkpoint was "
            "saved before it; lower the learning rate or check the input data")


def main(argv):
    flags = dict(arg[2:].split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    overrides = dict(item.split("=", 1) for item in flags["params_override"].split(","))
    model_dir = flags["model_dir"]
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "starts"), "a") as handle:
        handle.write(flags["params_override"] + "\n")
    lr = float(overrides["optimizer.learning_rate"])
    batch = int(overrides["train.global_batch_size"])
    seed = int(overrides["train.seed"])
    if os.environ.get("STUDY_FAKE_FAIL"):
        print("error: no TFRecords match data.train_file_pattern=/nowhere", file=sys.stderr)
        return 2
    hang_above = os.environ.get("STUDY_FAKE_HANG_ABOVE_LR")
    if hang_above and lr > float(hang_above):
        time.sleep(3600)
    if lr > 0.3:
        print(DIVERGED, file=sys.stderr)
        return 2
    accuracy = 0.9 - 0.1 * abs(math.log10(lr / 0.1)) - 0.01 * math.log2(batch) + 0.001 * seed
    micro = int(overrides["train.micro_batch_size"])
    results = {
        "global_batch_size": batch,
        "steps": int(overrides["train.steps"]),
        "wall_time_seconds": 1.5,
        "eval": {"top_1_accuracy": accuracy, "top_5_accuracy": min(1.0, accuracy + 0.05),
                 "loss": 2.0 - accuracy},
        "train": {"loss": 0.5, **({"gradient_noise_scale": 100.0 + batch}
                                  if batch > micro else {})},
    }
    with open(os.path.join(model_dir, "results.json"), "w") as handle:
        json.dump(results, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
