"""Build hook of the PyTorch adapter's wheel: builds libsmartswap.so with the project's
Makefile (non-sanitized, in build-wheel/) and puts it inside the package. Editable installs
(`pip install -e .`, `make venv`) skip it: the package then loads build/libsmartswap.so from the
tree (python/smartswap/_lib.py)."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLib(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        out = os.environ.get("SMARTSWAP_WHEEL_BUILD", "build-wheel")
        jobs = os.environ.get("SMARTSWAP_JOBS", "2")
        subprocess.check_call(["make", "-C", HERE, "BUILD=" + out, "SANITIZE=", "-j" + jobs, "lib"])
        dst = os.path.join(self.build_lib, "smartswap")
        os.makedirs(dst, exist_ok=True)
        shutil.copy2(os.path.join(HERE, out, "libsmartswap.so"), os.path.join(dst, "libsmartswap.so"))


class BinaryDistribution(Distribution):
    def has_ext_modules(self):   # a platform wheel: it carries a shared library
        return True


setup(cmdclass={"build_py": BuildWithLib}, distclass=BinaryDistribution)
