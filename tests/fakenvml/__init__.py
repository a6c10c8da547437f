"""A fake ``libnvidia-ml.so.1`` so that tests run the real pynvml code without a GPU.

``fakenvml.c`` exports the NVML functions pynvml calls for
``layoutgen.live.nvml.read()`` and answers from the JSON file named by
``$FAKE_NVML_JSON`` (its header comment describes the format).  ``build()``
compiles it with the system C compiler; a missing compiler is a failure, never
a skip (CI has one: it builds llama.cpp).

Three ways to use it, all through the ``fake_nvml`` fixture of
``conftest_plugin.py`` (a test module declares
``pytest_plugins = ["tests.fakenvml.conftest_plugin"]``):

* ``fake_nvml.env(spec)``: the environment for any subprocess
  (``LD_LIBRARY_PATH=<dir of the fake>``, ``FAKE_NVML_JSON=<spec file>``);
  pynvml's ``CDLL("libnvidia-ml.so.1")`` finds the fake first, since
  LD_LIBRARY_PATH comes before the ld.so cache where a real driver library
  would be.  ``fake_nvml.run(argv, spec)`` runs a command with it.
* ``fake_nvml.read(spec)``: ``read()`` in a subprocess (``runner.py``), its
  report as a dict, or ``{"error": message}`` for an ``NvmlError``.
* ``with fake_nvml.in_process(spec):``: the fake loaded by path into this
  interpreter and installed as ``pynvml.nvmlLib`` (restored on exit), for
  monkeypatching pynvml itself.

``absent_env()`` hides every libnvidia-ml, a real one included: its
LD_LIBRARY_PATH names a directory whose ``libnvidia-ml.so.1`` is not an ELF
file, and glibc's dlopen stops at the first file of the name it finds, so
loading fails whatever the ld.so cache holds.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("fakenvml.c")
SONAME = "libnvidia-ml.so.1"
ROOT = Path(__file__).resolve().parents[2]

#: JSON spec: a mapping (dumped as JSON), or the raw text/bytes of the file.
Spec = Mapping[str, Any] | str | bytes

_built: dict[str, Path] = {}


class CompilerMissing(RuntimeError):
    """No C compiler: the fake NVML library cannot be built."""


def compiler() -> str:
    for name in ("cc", "gcc"):
        found = shutil.which(name)
        if found:
            return found
    raise CompilerMissing(
        "tests/fakenvml needs a C compiler (cc or gcc) to build the fake libnvidia-ml.so.1; "
        "install one (Debian: apt-get install gcc)"
    )


def build(tmpdir: str | Path) -> Path:
    """``<tmpdir>/fakenvml-<hash>/libnvidia-ml.so.1``, compiled once per source and process."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cached = _built.get(digest)
    if cached is not None and cached.exists():
        return cached
    out_dir = Path(tmpdir) / f"fakenvml-{digest}"
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / SONAME
    argv = [
        compiler(),
        "-shared",
        "-fPIC",
        "-O2",
        "-std=c11",
        "-Wall",
        "-Wextra",
        "-fvisibility=hidden",
        f"-Wl,-soname,{SONAME}",
        "-o",
        str(lib),
        str(SOURCE),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed: {' '.join(argv)}\n{done.stderr}")
    _built[digest] = lib
    return lib


def blocker_dir(tmpdir: str | Path) -> Path:
    """A directory whose ``libnvidia-ml.so.1`` cannot be loaded (see the module docstring)."""
    path = Path(tmpdir) / "nvml-blocked"
    path.mkdir(parents=True, exist_ok=True)
    (path / SONAME).write_text("not a shared library: hides any real libnvidia-ml.so.1\n" * 4)
    return path


@dataclass(frozen=True)
class FakeNvml:
    lib: Path  # .../libnvidia-ml.so.1
    workdir: Path  # where spec files go

    @property
    def lib_dir(self) -> Path:
        return self.lib.parent

    def write_spec(self, spec: Spec) -> Path:
        data = spec if isinstance(spec, str | bytes) else json.dumps(spec, indent=1)
        raw = data.encode() if isinstance(data, str) else data
        name = f"nvml-{hashlib.sha256(raw).hexdigest()[:12]}.json"
        path = self.workdir / name
        path.write_bytes(raw)
        return path

    def env(self, spec: Spec, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: os.environ) with the fake first on LD_LIBRARY_PATH."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = str(self.lib_dir)
        env["FAKE_NVML_JSON"] = str(self.write_spec(spec))
        return env

    def absent_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """An environment in which no libnvidia-ml.so.1 can be loaded, even a real one."""
        env = dict(os.environ if base is None else base)
        env["LD_LIBRARY_PATH"] = str(blocker_dir(self.workdir))
        env.pop("FAKE_NVML_JSON", None)
        return env

    def run(
        self, argv: Sequence[str], spec: Spec, **kwargs: Any
    ) -> subprocess.CompletedProcess[str]:
        """``argv`` against the fake answering ``spec``; output captured as text."""
        env = self.env(spec, kwargs.pop("env", None))
        return subprocess.run(
            list(argv), env=env, capture_output=True, text=True, check=False, **kwargs
        )

    def read(
        self,
        spec: Spec | None = None,
        *,
        env: Mapping[str, str] | None = None,
        proc_root: Path | None = None,
        pin: bool = False,
    ) -> dict[str, Any]:
        """``read()`` in a fresh interpreter, against ``spec`` or in ``env`` as given.

        ``pin``: load libnvidia-ml.so.1 only from LD_LIBRARY_PATH's directories (a
        host without a driver), never from the ld.so cache.
        """
        assert (spec is None) != (env is None), "give a spec or an environment"
        run_env = dict(env) if env is not None else self.env(spec or {})
        run_env["PYTHONPATH"] = str(ROOT)
        argv = [sys.executable, "-m", "tests.fakenvml.runner"]
        if proc_root is not None:
            argv += ["--proc-root", str(proc_root)]
        if pin:
            argv.append("--pin")
        done = subprocess.run(
            argv, env=run_env, cwd=ROOT, capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise AssertionError(f"runner exited {done.returncode}:\n{done.stderr}")
        result: dict[str, Any] = json.loads(done.stdout)
        result["stderr"] = done.stderr
        return result

    @contextmanager
    def in_process(self, spec: Spec) -> Iterator[Any]:
        """pynvml, in this interpreter, talking to the fake; yields the module."""
        import pynvml

        saved_lib = pynvml.nvmlLib
        saved_cache = dict(pynvml._nvmlGetFunctionPointer_cache)
        saved_json = os.environ.get("FAKE_NVML_JSON")
        # By path, so that glibc maps this file even if a library with the same
        # soname is already loaded; pynvml then never calls CDLL itself.
        pynvml.nvmlLib = ctypes.CDLL(str(self.lib))
        pynvml._nvmlGetFunctionPointer_cache.clear()
        os.environ["FAKE_NVML_JSON"] = str(self.write_spec(spec))
        try:
            yield pynvml
        finally:
            pynvml.nvmlLib = saved_lib
            pynvml._nvmlGetFunctionPointer_cache.clear()
            pynvml._nvmlGetFunctionPointer_cache.update(saved_cache)
            if saved_json is None:
                os.environ.pop("FAKE_NVML_JSON", None)
            else:
                os.environ["FAKE_NVML_JSON"] = saved_json
