#!/usr/bin/env python3
"""deploy/kubernetes/ checked without a cluster.

kubectl's --dry-run=client still asks an API server for the schema (and
fails without one), so: `kubectl kustomize` renders the DaemonSet as
`kubectl apply -k` would, `kubectl label --local` reads every object (and
the inference pod's example) as Kubernetes objects, and this script checks
what the two sides must agree on. Then the DaemonSet's entrypoint runs for
real with two host-backend daemons, whose by-uuid links must appear and go
at SIGTERM.

    kubernetes_test.py <source dir> <gputuned binary>

Exit 77 (skipped) without kubectl.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import yaml

SKIP = 77


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True,
                          timeout=60, **kw).stdout


def by_kind(docs, kind):
    found = [d for d in docs if d and d.get("kind") == kind]
    assert len(found) == 1, f"one {kind} expected, found {len(found)}"
    return found[0]


def check_manifests(src):
    kube = os.path.join(src, "deploy", "kubernetes")
    rendered = run(["kubectl", "kustomize", kube])
    example = os.path.join(kube, "example", "inference-pod.yaml")
    for text in (rendered, open(example).read()):
        # Every document is an object kubectl can read (apiVersion, kind,
        # metadata), without a server.
        run(["kubectl", "label", "--local", "-o", "yaml", "-f", "-",
             "checked=yes"], input=text)
    docs = list(yaml.safe_load_all(rendered))
    ds = by_kind(docs, "DaemonSet")
    cm = by_kind(docs, "ConfigMap")
    pod = by_kind(list(yaml.safe_load_all(open(example))), "Pod")

    spec = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    for k, v in ds["spec"]["selector"]["matchLabels"].items():
        assert labels.get(k) == v, f"selector {k}={v} does not match the pod"
    assert ds["metadata"]["namespace"] == "gputune"
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in spec["containers"] + spec.get("initContainers", []):
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']}: no volume {m['name']}"
    # The generated ConfigMap (hashed name) is the one mounted.
    assert volumes["entrypoint"]["configMap"]["name"] == cm["metadata"]["name"]
    script = cm["data"]["gputuned-per-gpu.sh"]
    run(["bash", "-n"], input=script)
    daemon = spec["containers"][0]
    # The DaemonSet must not take GPUs from the device plugin.
    for r in ("limits", "requests"):
        assert "nvidia.com/gpu" not in daemon.get("resources", {}).get(r, {})
    env = {e["name"]: e["value"] for e in daemon["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    sockets = volumes["sockets"]["hostPath"]["path"]
    mounts = {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}
    assert mounts["sockets"] == env["GPUTUNE_SOCKET_DIR"]

    # The inference pod: the same host directory, the sockets' group, a GPU.
    pspec = pod["spec"]
    pvolumes = {v["name"]: v for v in pspec["volumes"]}
    server = pspec["containers"][0]
    pmounts = {m["name"]: m for m in server["volumeMounts"]}
    host_dirs = {n: v["hostPath"]["path"] for n, v in pvolumes.items()
                 if "hostPath" in v}
    name = next(n for n, p in host_dirs.items() if p == sockets)
    penv = {e["name"]: e["value"] for e in server.get("env", [])}
    assert pmounts[name]["mountPath"] == penv.get("GPUTUNE_SOCKET_DIR",
                                                  "/run/gputuned")
    group = spec["securityContext"]["runAsGroup"]
    assert group in pspec["securityContext"]["supplementalGroups"], (
        "the inference pod must be in the sockets' group")
    assert server["resources"]["limits"]["nvidia.com/gpu"] >= 1
    return script


def run_entrypoint(script, gputuned):
    tmp = tempfile.mkdtemp(prefix="gputune-k8s-")
    try:
        path = os.path.join(tmp, "gputuned-per-gpu.sh")
        with open(path, "w") as f:
            f.write(script)
        sockets = os.path.join(tmp, "run")
        env = dict(os.environ,
                   PATH=os.path.dirname(gputuned) + ":" + os.environ["PATH"],
                   GPUTUNE_SOCKET_DIR=sockets,
                   GPUTUNE_STATE_DIR=os.path.join(tmp, "state"),
                   GPUTUNE_GPUS="0 1",
                   GPUTUNED_ARGS="--backend=host --log_level=warn")
        log = open(os.path.join(tmp, "log"), "w")
        proc = subprocess.Popen(["bash", path], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
        links = os.path.join(sockets, "by-uuid")
        deadline = time.monotonic() + 60
        names = []
        while time.monotonic() < deadline:
            if os.path.isdir(links):
                names = sorted(os.listdir(links))
                if len(names) == 2:
                    break
            assert proc.poll() is None, open(os.path.join(tmp, "log")).read()
            time.sleep(0.05)
        assert len(names) == 2, f"by-uuid links: {names}"
        targets = sorted(os.readlink(os.path.join(links, n)) for n in names)
        assert targets == ["../gpu0.sock", "../gpu1.sock"], targets
        assert all(n.startswith("HOST-") for n in names), names
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        assert os.listdir(links) == [], "links left after SIGTERM"
        assert not any(n.endswith(".sock") for n in os.listdir(sockets))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    src, gputuned = sys.argv[1], sys.argv[2]
    if shutil.which("kubectl") is None:
        print("skipped: no kubectl (apt-get install kubectl)")
        return SKIP
    script = check_manifests(src)
    run_entrypoint(script, gputuned)
    print("deploy/kubernetes: manifests and entrypoint OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
