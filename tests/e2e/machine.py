"""A host for the end-to-end suite: systemd as PID 1 in a privileged podman container.

The root filesystem is Debian trixie's packages (tests/tools/build_rootfs.sh,
cached under ~/.cache/layoutgen/tools); podman imports it once per key.  What
../shared/notes/systemd-podman-e2e.md found on CI's machines is applied here:
runc and raised ulimits on the host through a CONTAINERS_CONF file, a bind-mounted
/var/lib/containers so the inner podman stores on overlay, the inner subnet
(10.123.0.0/24, in the rootfs), masked units (in the rootfs).

Inside: the repository at /src (read-only), ``layoutgen`` on PATH, the fake
NVML library (tests/fakenvml) at /opt/fakenvml with ``fakegpu.service``
(tests/e2e/fakegpu.py) writing the GPU state it answers from, and
``/usr/local/bin/llama-server`` = tests/e2e/fakeserver.py.  For quadlet units:
the same rootfs imported inside as ``localhost/e2e-base``, the fake server as
the image ``localhost/e2e-server``, and a CDI spec naming the fake GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GPU = {
    "name": "NVIDIA RTX 6000 Ada Generation",
    "uuid": "GPU-6e2e0000-0000-4000-8000-000000000001",
    "pci_bus_id": "00000000:01:00.0",
    "total": 48 << 30,
    "cc": [8, 9],
}
CONTAINERS_CONF = """\
[containers]
default_ulimits = ["nofile=16384:16384", "nproc=32768:32768"]
[engine]
runtime = "runc"
"""
CDI = """\
cdiVersion: "0.5.0"
kind: nvidia.com/gpu
devices:
  - name: "0"
    containerEdits:
      env: ["FAKE_GPU=0"]
  - name: "GPU-6e2e0000-0000-4000-8000-000000000001"
    containerEdits:
      env: ["FAKE_GPU=0"]
containerEdits:
  mounts:
    - {hostPath: /run/fakegpu, containerPath: /run/fakegpu, options: [ro, bind]}
"""
CONTAINERFILE = """\
FROM localhost/e2e-base
COPY fakeserver.py /usr/local/bin/llama-server
ENTRYPOINT ["/usr/bin/python3", "/usr/local/bin/llama-server"]
"""
SETUP = r"""
set -e
cat > /usr/local/bin/layoutgen <<'EOF'
#!/bin/sh
export PYTHONPATH=/src PYTHONDONTWRITEBYTECODE=1
export LD_LIBRARY_PATH=/opt/fakenvml FAKE_NVML_JSON=/run/fakegpu/nvml.json
exec python3 -c 'from layoutgen.cli import main; main()' "$@"
EOF
chmod 755 /usr/local/bin/layoutgen
install -m 755 /src/tests/e2e/fakeserver.py /usr/local/bin/llama-server
mkdir -p /etc/fakegpu /srv/models /srv/specs/models
chmod 755 /srv /srv/models
cp /src/layouts/models/gemma-4-26b-a4b-q5_k_m.yaml /srv/specs/models/
cat > /etc/systemd/system/fakegpu.service <<'EOF'
[Unit]
Description=e2e: the fake NVIDIA driver (tests/e2e/fakegpu.py)
[Service]
RuntimeDirectory=fakegpu
RuntimeDirectoryMode=0755
RuntimeDirectoryPreserve=yes
ExecStart=/usr/bin/python3 /src/tests/e2e/fakegpu.py /etc/fakegpu/state.json
EOF
systemctl daemon-reload
"""


class Machine:
    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.name = name
        self.env = env

    def sh(
        self, script: str, timeout: float = 300, user: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        argv = ["podman", "exec"]
        if user:
            argv += ["--user", user, "--env", "XDG_RUNTIME_DIR=/run/user/1000"]
        argv += [self.name, "bash", "-c", script]
        return subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )

    def ok(self, script: str, timeout: float = 300, user: str | None = None) -> str:
        done = self.sh(script, timeout, user)
        assert done.returncode == 0, (
            f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout

    def write(self, path: str, text: str) -> None:
        done = subprocess.run(
            ["podman", "exec", "-i", self.name, "bash", "-c", f"cat > {path}"],
            input=text,
            env=self.env,
            text=True,
            capture_output=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr

    def model(self, name: str, **behaviour: object) -> str:
        path = f"/srv/models/{name}.gguf"
        self.write(path, json.dumps(behaviour))
        self.ok(f"chmod 644 {path}")
        return path

    def events(self) -> list[tuple[float, int, str]]:
        out = self.sh("cat /run/fakegpu/events.log 2>/dev/null").stdout
        rows = []
        for line in out.splitlines():
            t, port, what = line.split()
            rows.append((float(t), int(port), what))
        return rows


def rootfs() -> Path:
    done = subprocess.run(
        ["bash", str(ROOT / "tests/tools/build_rootfs.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PIP": os.environ.get("PIP", f"{ROOT}/.venv/bin/pip")},
    )
    assert done.returncode == 0, f"building the root filesystem failed:\n{done.stderr}"
    return Path(done.stdout.strip().splitlines()[-1])


def boot(workdir: Path, fakenvml_lib: Path, quadlet: bool) -> Machine:
    tar = rootfs()
    key = tar.name.removeprefix("rootfs-").removesuffix(".tar.zst")
    conf = workdir / "containers.conf"
    conf.write_text(CONTAINERS_CONF)
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    image = f"localhost/layoutgen-e2e:{key}"
    if subprocess.run(["podman", "image", "exists", image], env=env, check=False).returncode:
        subprocess.run(
            [
                "podman",
                "import",
                "--quiet",
                "--change",
                'CMD ["/sbin/init"]',
                "--change",
                "ENV container=podman",
                "--change",
                "ENV PODMAN_IGNORE_CGROUPSV1_WARNING=1",
                str(tar),
                image,
            ],
            env=env,
            check=True,
            capture_output=True,
        )
    # images of older root filesystems (another key) go: ~0.5 GB each
    listed = subprocess.run(
        ["podman", "images", "--format", "{{.Repository}}:{{.Tag}}", "localhost/layoutgen-e2e"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for old in listed:
        if old != image:
            subprocess.run(["podman", "rmi", "-f", old], env=env, capture_output=True, check=False)
    # machines of runs that were killed (their pytest's PID is gone)
    names = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.Names}}", "--filter", "name=^layoutgen-e2e-"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for stale in names:
        pid = stale.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["podman", "rm", "-f", stale], env=env, capture_output=True, check=False)
    storage = Path(tempfile.mkdtemp(prefix="layoutgen-e2e-storage-", dir="/var/tmp"))
    name = f"layoutgen-e2e-{os.getpid()}"
    subprocess.run(["podman", "rm", "-f", name], env=env, capture_output=True, check=False)
    subprocess.run(
        [
            "podman",
            "run",
            "-d",
            "--privileged",
            "--systemd=always",
            "--name",
            name,
            "--hostname",
            "e2e",
            "-v",
            f"{storage}:/var/lib/containers",
            "-v",
            f"{ROOT}:/src:ro",
            "-v",
            f"{tar.parent}:/cache:ro",
            "-v",
            f"{fakenvml_lib.parent}:/opt/fakenvml:ro",
            image,
            "/sbin/init",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    m = Machine(name, env)
    m.storage = storage  # type: ignore[attr-defined]
    m.ok(
        "for i in $(seq 100); do [ -S /run/dbus/system_bus_socket ] && break; sleep 0.1; done; "
        "systemctl is-system-running --wait || { systemctl --failed --no-pager; false; }",
        120,
    )
    m.ok(SETUP)
    m.write("/etc/fakegpu/state.json", json.dumps({"gpus": [GPU]}))
    m.ok(
        "systemctl start fakegpu.service && for i in $(seq 50); do "
        "[ -s /run/fakegpu/nvml.json ] && exit 0; sleep 0.1; done; exit 1"
    )
    if quadlet:
        m.ok("mkdir -p /etc/cdi")
        m.write("/etc/cdi/fakegpu.yaml", CDI)
        m.write("/tmp/Containerfile", CONTAINERFILE)
        m.ok(
            f"zstd -dc /cache/{tar.name} | podman import --quiet - localhost/e2e-base >/dev/null "
            "&& podman build --quiet -t localhost/e2e-server:latest -f /tmp/Containerfile "
            "/src/tests/e2e >/dev/null",
            300,
        )
    return m


def shutdown(m: Machine) -> None:
    subprocess.run(
        ["podman", "rm", "-f", "-t", "2", m.name], env=m.env, capture_output=True, check=False
    )
    shutil.rmtree(m.storage, ignore_errors=True)
