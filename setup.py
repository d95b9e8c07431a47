"""Builds the compiled fold and admission (monitor/aggregate/_fold.pyx, _admission.pyx and
its _parts.pyx), the OTLP wire checker and scanner (monitor/ingest/_otlp_check.pyx,
_otlp_wire.pyx, sharing _protowire.pxd), Kafka's murmur2 key hash
(monitor/worker/_murmur2.pyx) and the JSONL line cutter (monitor/offline/_lines.pyx);
metadata lives in pyproject.toml.

Without a C compiler the build goes on and ragmon runs the same code in pure Python
(monitor/aggregate/compiled.py picks whichever is there), ~1.9x slower on replay. With
RAGMON_REQUIRE_COMPILED=1 (set in .ci/run) a failed compile fails the install instead.
"""

import os

from Cython.Build import cythonize
from setuptools import Extension, setup

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")

setup(ext_modules=cythonize(
    [Extension(f"monitor.{name.replace('/', '.')}", [f"monitor/{name}.pyx"],
               optional=not REQUIRED, extra_compile_args=["-O2"])
     for name in ("aggregate/_fold", "aggregate/_admission", "aggregate/_parts",
                  "ingest/_otlp_check", "ingest/_otlp_wire", "worker/_murmur2",
                  "offline/_lines")],
    compiler_directives={"language_level": "3"},
))
