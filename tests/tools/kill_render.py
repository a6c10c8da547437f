"""Write a rendered tree into an output root, to be killed (tests/test_outdir_kill.py).

    python tests/tools/kill_render.py ROOT RENDERED.json [--journal] [--wait-go]

RENDERED.json is ``{spec: {path: text}}``, what ``layoutgen render`` would
write.  Validation and rendering are done beforehand, so the whole life of
this process after "ready" is the write itself: a kill at a random moment
after "ready" lands somewhere in it.  ``--journal`` swaps with two renames
and a journal, as on a filesystem without RENAME_EXCHANGE; ``--wait-go``
waits for a line on stdin after "ready" (to start two writers at once).
Prints "done SECONDS" when the write is complete; exit 1 with the error on
stderr if layoutgen refuses.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from layoutgen.errors import LayoutgenError
from layoutgen.render import outdir, swap


def main(argv: list[str]) -> int:
    root, rendered_file = Path(argv[0]), Path(argv[1])
    rendered = json.loads(rendered_file.read_text(encoding="utf-8"))
    if "--journal" in argv:
        swap._renameat2 = None
    print("ready", flush=True)
    if "--wait-go" in argv:
        sys.stdin.readline()
    start = time.perf_counter()
    try:
        outdir.write(root, rendered)
    except LayoutgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"done {time.perf_counter() - start:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
