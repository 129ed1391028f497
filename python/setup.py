# The gputune Python package: pure Python over libgputune's C API (ctypes),
# so installing it compiles nothing:
#   pip install ./python            (offline: setuptools from the system)
# libgputune.so.0 itself comes from the gputune package (or cmake --install);
# $GPUTUNE_LIBRARY points at another one.
from setuptools import setup

setup(
    name="gputune",
    version="0.1.0",
    description="Python client of gputuned, the per-GPU tuning daemon",
    packages=["gputune"],
    package_data={"gputune": ["py.typed"]},
    python_requires=">=3.9",
    zip_safe=False,
)
