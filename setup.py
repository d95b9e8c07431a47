"""Builds the optional compiled fold and admission (monitor/_fold.pyx, monitor/_admit.pyx);
metadata lives in pyproject.toml.

Without a C compiler the build goes on (`optional=True`) and ragmon runs the same fold
in pure Python (monitor/fold.py picks whichever is there), ~1.9x slower on replay.
"""

from Cython.Build import cythonize
from setuptools import Extension, setup

setup(ext_modules=cythonize(
    [Extension(f"monitor.{name}", [f"monitor/{name}.pyx"], optional=True,
               extra_compile_args=["-O2"]) for name in ("_fold", "_admit")],
    compiler_directives={"language_level": "3"},
))
