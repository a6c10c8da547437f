"""The installed ``layoutgen`` script: exit codes and output survive its fast exit.

``main()`` leaves by ``os._exit`` once stdout and stderr are flushed (no
interpreter teardown); nothing written may be lost on the way, and a reader
that goes away early is no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

LAYOUTGEN = str(Path(sys.executable).with_name("layoutgen"))
FINAL = ROOT / "layouts" / "familiar-final.yaml"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LAYOUTGEN, *args], capture_output=True, text=True, check=False)


def test_exit_codes_and_every_byte_of_output() -> None:
    ok = _run("plan", "--json", str(FINAL))
    assert ok.returncode == 0 and ok.stdout.rstrip().endswith("}")
    inprocess = subprocess.run(
        [
            sys.executable,
            "-c",
            "from layoutgen.cli import app; app()",
            "plan",
            "--json",
            str(FINAL),
        ],
        capture_output=True,
        text=True,
    )
    assert ok.stdout == inprocess.stdout  # flushed whole before os._exit
    missing = _run("validate", "no-such-spec.yaml")
    assert missing.returncode == 1 and "no-such-spec.yaml: error: no such file" in missing.stdout
    usage = _run("validate", "--no-such-option")
    assert usage.returncode == 2 and "No such option" in usage.stderr


def test_a_reader_that_leaves_early_is_no_traceback() -> None:
    proc = subprocess.Popen([LAYOUTGEN, "schema"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() in (0, 1) and "Traceback" not in err
