"""The build behind `pip install .` (pyproject.toml): CMake builds the extension ferry._C for the
interpreter that runs pip, against the torch it imports; setuptools packs it with python/ferry/.

Only the extension and the libraries it links are built (no tests, examples, benchmarks or command).
"""

import hashlib
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = pathlib.Path(__file__).resolve().parent


def project_version() -> str:
    """The version in CMakeLists.txt's project(), the one place it is set."""
    match = re.search(r"project\(ferry VERSION ([0-9.]+)", (ROOT / "CMakeLists.txt").read_text())
    if not match:
        raise RuntimeError("ferry: no version in CMakeLists.txt's project()")
    return match.group(1)


def torch_cmake_prefix() -> str:
    """Where the imported torch keeps its CMake package (TorchConfig.cmake), if it has one."""
    try:
        import torch.utils
    except ImportError as error:
        raise RuntimeError(f"ferry: pip install needs torch importable by {sys.executable}: {error}") from error
    return torch.utils.cmake_prefix_path


class CMakeExtension(Extension):
    def __init__(self) -> None:
        super().__init__("ferry._C", sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        # One build folder per interpreter (a venv has its own torch and its own cached paths).
        interpreter = hashlib.sha1(sys.prefix.encode()).hexdigest()[:8]
        default_dir = ROOT / "build" / f"pip-{sys.implementation.cache_tag}-{interpreter}"
        build_dir = pathlib.Path(os.environ.get("FERRY_BUILD_DIR") or default_dir)
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build_dir),
            "-DCMAKE_BUILD_TYPE=Release",
            # The libtorch of the torch this interpreter imports comes first (a pip wheel's; Debian's
            # torch has none there, and its libtorch-dev is found on the system paths). The
            # CMAKE_PREFIX_PATH environment variable is still searched after it.
            f"-DCMAKE_PREFIX_PATH={torch_cmake_prefix()}",
            "-DFERRY_BUILD_PYTHON=ON",  # fail, saying why, rather than build nothing
            f"-DPython_EXECUTABLE={sys.executable}",
            "-DFERRY_BUILD_TESTS=OFF", "-DFERRY_BUILD_EXAMPLES=OFF", "-DFERRY_BUILD_BENCH=OFF",
        ]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("FERRY_CMAKE_ARGS", ""))
        jobs = str(os.cpu_count() or 1)
        subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build_dir), "--target", "ferry_python_ext", "--parallel", jobs], check=True)
        built = build_dir / "python" / "ferry" / ("_C" + sysconfig.get_config_var("EXT_SUFFIX"))
        if not built.exists():
            raise RuntimeError(f"ferry: the build made no {built}")
        target = pathlib.Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(built, target)
        # The sentencepiece module, beside the extension where ferry looks for it (a build without
        # libsentencepiece-dev makes none).
        module = build_dir / "lib" / "libferry_sentencepiece.so"
        if module.exists():
            shutil.copy2(module, target.parent / module.name)


setup(version=project_version(), ext_modules=[CMakeExtension()], cmdclass={"build_ext": CMakeBuild})
