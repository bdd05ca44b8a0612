"""Build script for the one optional C extension; everything else is declared in pyproject.toml.

`bert_tf.data._draws` speeds up pretraining-record creation. It is optional: where it cannot be compiled (no C
compiler), installation goes on and the same records are made by the pure-Python path, more slowly.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("bert_tf.data._draws", ["bert_tf/data/_draws.c"], optional=True,
                             extra_compile_args=["-O2"])])
