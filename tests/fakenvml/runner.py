"""``python -m tests.fakenvml.runner``: ``read()`` once, its answer as JSON on stdout.

``{"report": {...}}`` (``dataclasses.asdict``) or ``{"error": "<NvmlError message>"}``;
anything else is a traceback and a non-zero exit, which fails the test.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
from pathlib import Path
from typing import Any


def pin_to_ld_library_path() -> None:
    """Make pynvml load libnvidia-ml.so.1 only from LD_LIBRARY_PATH's directories."""
    import pynvml

    def cdll(name: str, *args: Any, **kwargs: Any) -> ctypes.CDLL:
        for directory in os.environ.get("LD_LIBRARY_PATH", "").split(":"):
            candidate = Path(directory) / name
            if directory and candidate.exists():
                return ctypes.CDLL(str(candidate), *args, **kwargs)
        raise OSError(f"{name}: not in LD_LIBRARY_PATH (pinned)")

    pynvml.CDLL = cdll


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--proc-root", default="/proc")
    parser.add_argument("--pin", action="store_true")
    args = parser.parse_args()
    if args.pin:
        pin_to_ld_library_path()

    from layoutgen.live import nvml

    try:
        report = nvml.read(proc_root=args.proc_root)
    except nvml.NvmlError as exc:
        print(json.dumps({"error": str(exc)}))
        return
    print(json.dumps({"report": dataclasses.asdict(report)}))


if __name__ == "__main__":
    main()
