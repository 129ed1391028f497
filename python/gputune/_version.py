"""The package's version: the project's, CMakeLists.txt's project(VERSION).

pyproject.toml reads it from here (setuptools reads the assignment without
importing the package); ctest "the version is the same everywhere"
(version/check_versions.cmake) fails when it differs from CMakeLists.txt's.
"""

__version__ = "0.1.0"
