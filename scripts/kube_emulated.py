"""Run any forge command against an emulated Kubernetes (kmock plus a test-only controller).

    .venv/bin/python scripts/kube_emulated.py [--images react,pi] [--namespace NS] \\
        -- forge eval examples/oracle.yaml --harness react --tasks claw-lite -k 1

What runs here is NOT a Kubernetes cluster. kmock (PyPI) emulates the Kubernetes API server
(it stores objects and serves create/get/list/watch/patch/delete); the test-only controller of
tests/forge/sandboxes/kube_controller.py (DockerKubelet) stands in for the kubelets: it watches
the namespace's pods and starts each one as a container of a private dockerd (host network,
the sandbox agent on a unique loopback IP, since that daemon runs with ``--bridge=none``), then
writes the pod's IP and phase back. Nothing here ran against a real API server: scheduling,
admission, RBAC enforcement, NetworkPolicy and pod networking are not exercised.

Steps: start a private dockerd in a temp root (never the shared ~/.cache/openforge/dockerd,
which other runs use); load the images the command needs (the base, for verifiers, and one per
harness) by ``docker save`` from the shared daemon when it has them at the current tags, else
build them here with forge.images.tags; start kmock and the controller; run the command as a
subprocess with ``sandbox.backend=kubernetes sandbox.kubernetes.api_url=<kmock>
sandbox.kubernetes.namespace=<NS>`` appended (proxy.host keeps its loopback default: the pods
share the host network; no registry), its output live; then tear down by pid in ``finally``:
the pod containers, kmock, the daemon (whose stop unmounts its leftovers) and its root.
The command's exit status is this script's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from forge.images import builder  # noqa: E402
from forge.images import tags as images  # noqa: E402
from forge.sandboxes import dockerd  # noqa: E402
from forge.sandboxes.tmproot import private_root  # noqa: E402

PARENT = Path(tempfile.gettempdir()) / "openforge-kube-emulated"
SHARED = dockerd.default_root()


def log(msg: str) -> None:
    print(f"[kube-emulated {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def harnesses_of(cmd: list[str]) -> list[str]:
    """The harnesses a forge command names (``--harness a,b``), else its config's ``harness``."""
    for i, a in enumerate(cmd):
        if a == "--harness" and i + 1 < len(cmd):
            return [h for h in cmd[i + 1].split(",") if h]
        if a.startswith("--harness="):
            return [h for h in a.split("=", 1)[1].split(",") if h]
    for a in cmd:
        if a.endswith((".yaml", ".yml")) and Path(a).is_file():
            import yaml

            h = (yaml.safe_load(Path(a).read_text()) or {}).get("harness")
            if isinstance(h, str):
                return [h]
    return ["react"]


def load_images(client: Any, names: list[str], dest_host: str) -> None:
    """Make the base and each harness image present in the private daemon: ``docker save`` from
    the shared daemon for the tags it has (one stream, layers shared), a build for the rest."""
    import docker

    wanted: dict[str, str] = {"base": images.base_tag()}
    for n in names:
        try:
            wanted[n] = images.harness_tag(n)
        except Exception as e:  # not installed here: the pod falls back to the base (or fails)
            log(f"{n}: no image tag ({type(e).__name__}: {e})")
    src_sock = SHARED / "sock"
    have: list[str] = []
    if dockerd.answers(src_sock):
        src = docker.DockerClient(base_url=f"unix://{src_sock}", timeout=120)
        try:
            have = [t for t in wanted.values() if builder.has_image(src, t)]
        finally:
            src.close()
    if have and shutil.which("docker"):
        t0 = time.monotonic()
        save = subprocess.Popen(
            ["docker", "-H", f"unix://{src_sock}", "save", *have], stdout=subprocess.PIPE
        )
        load = subprocess.run(
            ["docker", "-H", dest_host, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            check=False,
        )
        save.stdout.close()  # type: ignore[union-attr]
        if save.wait() != 0 or load.returncode != 0:
            log(f"docker save/load failed ({load.stderr.strip()}); building instead")
        else:
            log(f"loaded {', '.join(have)} from {SHARED} in {time.monotonic() - t0:.1f}s")
    for name, tag in wanted.items():
        if builder.has_image(client, tag):
            continue
        t0 = time.monotonic()
        if name == "base":
            builder.build_base(client, progress=lambda m: log(f"[images] {m}"))
        else:
            builder.build_harness(client, name, progress=lambda m: log(f"[images] {m}"))
        log(f"built {tag} in {time.monotonic() - t0:.1f}s")


def run_command(cmd: list[str], env: dict[str, str]) -> int:
    """``cmd`` in its own process group, its output live; SIGINT/SIGTERM are passed on."""
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signum)

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", help="harness images to provide (default: the command's)")
    ap.add_argument("--namespace", default="forge-emulated", help="namespace of the pods")
    ap.add_argument("cmd", nargs=argparse.REMAINDER, help="-- forge COMMAND ...")
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --, e.g. -- forge eval examples/oracle.yaml")
    if cmd[0] == "forge" and not shutil.which("forge"):
        cmd[0] = str(Path(sys.executable).with_name("forge"))
    names = args.images.split(",") if args.images else harnesses_of(cmd)

    import docker

    from tests.forge.sandboxes.kube_controller import DockerKubelet, KMock

    private_root(PARENT)  # a private folder of ours, never one another user made
    dockerd.sweep_stale(PARENT)  # roots of earlier runs that crashed (their owner is dead)
    root = Path(tempfile.mkdtemp(prefix="d", dir=PARENT))
    daemon = kube = kubelet = client = None
    t_start = time.monotonic()
    rc = 1
    try:
        daemon = dockerd.start_daemon(root)
        log(f"private dockerd pid {daemon.pid} at {root}")
        client = docker.DockerClient(base_url=daemon.host, timeout=300)
        load_images(client, names, daemon.host)
        kube = KMock()
        kubelet = DockerKubelet(kube, args.namespace, client)
        log(f"kmock at {kube.url}; controller on namespace {args.namespace}")
        overrides = [
            "sandbox.backend=kubernetes",
            f"sandbox.kubernetes.api_url={kube.url}",
            f"sandbox.kubernetes.namespace={args.namespace}",
        ]
        full = [*cmd, *overrides]
        log(f"setup {time.monotonic() - t_start:.1f}s; running: {' '.join(full)}")
        t0 = time.monotonic()
        rc = run_command(full, dict(os.environ))
        log(f"command exited {rc} after {time.monotonic() - t0:.1f}s")
        posted = kube.requests("POST", rf"/api/v1/namespaces/{args.namespace}/pods")
        log(f"pods created through kmock: {len(posted)}")
        left = kube.objects("v1/pods", args.namespace)
        log(f"pods left in kmock: {sorted(left) or 'none'}")
    finally:
        if kubelet is not None:
            kubelet.close()
        if client is not None:
            for c in client.api.containers(all=True, filters={"label": "openforge.kubelet"}):
                with contextlib.suppress(Exception):
                    client.api.remove_container(c["Id"], force=True)
            client.close()
        if kube is not None:
            kube.close()
        if daemon is not None:
            dockerd.stop_daemon(daemon)  # by pid; unmounts what it left in its folder
        shutil.rmtree(root, ignore_errors=True)
        log(f"torn down (total {time.monotonic() - t_start:.1f}s)")
    return rc


if __name__ == "__main__":
    sys.exit(main())
