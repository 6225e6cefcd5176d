#!/usr/bin/env python3
"""Checks the container image recipe, the Kubernetes manifests and the Prometheus
alerting rules without Docker, a cluster or a Prometheus server (scripts/test.sh runs
it; docs/operations.md, "Container image", "Kubernetes" and "Alerts worth setting",
describe them).

- Dockerfile (parsed with dockerfile-parse): multi-stage; the final stage is not the
  Rust image, runs as a user other than root, gets both binaries from the builder,
  and starts `concord`; every `--bin` it builds is a binary of the workspace (from
  `cargo metadata`), every COPY source exists and is not kept out by .dockerignore,
  and every workspace member is copied into the builder.
- deploy/k8s/*.yaml: every resource against the Kubernetes JSON schemas bundled by
  kubernetes-validate (strict: unknown fields are errors), for the oldest and the
  newest version we claim; then what the schemas cannot say: 3 replicas, the
  headless Service named by serviceName publishes not-ready pods, the PDB allows one
  member down, the probes hit /readyz and /healthz on the health port the server
  binds (and no --insecure), the members in the ConfigMap are the pods' stable DNS names, ...; and the
  start script, run by /bin/sh with a stand-in `concord`, starts pod concord-N as
  server N+1 with that member's certificate files.
- deploy/prometheus/concord-alerts.yaml: `promtool check rules` and `promtool test
  rules` on its unit tests (concord-alerts.test.yaml); every rule has an alert name,
  expr, for, severity, summary and description; every concord_ metric an expression
  names is in the Metrics table of docs/operations.md (a histogram only through its
  _bucket, _sum or _count series); the alerts are those docs/operations.md explains
  under "Alerts worth setting". (Test t48 checks the names against a real scrape.)

Usage: scripts/check_deploy.py [REPO_ROOT]   (exit status 1 and a list on failure)
"""

import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import kubernetes_validate
import yaml
from dockerfile_parse import DockerfileParser

# Kubernetes versions the manifests must validate against: the oldest we claim and
# the newest the installed kubernetes-validate bundles.
K8S_OLDEST = "1.29.0"

CLIENT_PORT, PEER_PORT, METRICS_PORT, HEALTH_PORT = 7181, 7182, 7183, 7184
#: ZooKeeper's own clients (--zookeeper-addr), on ZooKeeper's usual client port.
ZOOKEEPER_PORT = 2181

failures = []


def check(ok, what):
    """Records `what` as a failure unless `ok`."""
    if not ok:
        failures.append(what)
    return ok


# --- Dockerfile ------------------------------------------------------------------


def workspace_members(root):
    """The workspace's member folders, as Cargo.toml lists them."""
    with open(root / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["members"]


def workspace_bins(root):
    """Names of the binary targets of the workspace's packages."""
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    bins = set()
    for package in json.loads(out)["packages"]:
        for target in package["targets"]:
            if "bin" in target["kind"]:
                bins.add(target["name"])
    return bins


def dockerignored(root):
    """Patterns of .dockerignore (comments and blanks dropped)."""
    path = root / ".dockerignore"
    if not check(path.exists(), ".dockerignore is missing"):
        return []
    lines = [line.strip() for line in path.read_text().splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def ignored(source, patterns):
    """Whether a COPY source is under a .dockerignore entry (plain folder names and
    `**/` prefixes, the forms the file uses)."""
    source = source.strip("/")
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        bare = pattern.removeprefix("**/")
        if source == bare or source.startswith(bare + "/"):
            return True
        if pattern.startswith("**/") and (source.endswith("/" + bare) or "/" + bare + "/" in source):
            return True
    return False


def stages(parser):
    """The Dockerfile's instructions split by FROM: a list of (from_value, [instr])."""
    result = []
    for instr in parser.structure:
        if instr["instruction"] == "FROM":
            result.append((instr["value"], []))
        elif result:
            result[-1][1].append(instr)
    return result


def check_dockerfile(root):
    path = root / "Dockerfile"
    if not check(path.exists(), "Dockerfile is missing"):
        return
    parser = DockerfileParser(path=str(path))
    all_stages = stages(parser)
    check(len(all_stages) >= 2, "the Dockerfile is not multi-stage")
    if not all_stages:
        return
    names = {}
    for from_value, _ in all_stages:
        m = re.match(r"(\S+)\s+AS\s+(\S+)", from_value, re.IGNORECASE)
        if m:
            names[m.group(2).lower()] = m.group(1)
    builder_image = names.get("builder", "")
    check(builder_image.startswith("rust:"), f"no `builder` stage on a rust image (got {builder_image!r})")
    final_from, final = all_stages[-1]
    check(not final_from.startswith("rust:"), f"the final stage is the Rust image: {final_from}")

    users = [i["value"] for i in final if i["instruction"] == "USER"]
    check(bool(users), "the final stage sets no USER (it would run as root)")
    if users:
        user = users[-1].split(":")[0].strip()
        check(user not in ("root", "0"), f"the final USER is root: {users[-1]}")

    copied = " ".join(
        i["value"] for i in final if i["instruction"] == "COPY" and "--from=builder" in i["value"]
    )
    for binary in ("concord", "concordctl"):
        check(re.search(rf"/{binary}(\s|$)", copied) is not None, f"the final stage does not copy {binary} from the builder")

    entry = [i["value"] for i in final if i["instruction"] == "ENTRYPOINT"]
    check(bool(entry) and json.loads(entry[-1]) == ["concord"], f'ENTRYPOINT is not ["concord"]: {entry}')
    check(any(i["instruction"] == "VOLUME" for i in final), "the final stage declares no data VOLUME")
    exposed = set()
    for i in final:
        if i["instruction"] == "EXPOSE":
            exposed.update(int(p.split("/")[0]) for p in i["value"].split())
    check(
        {CLIENT_PORT, PEER_PORT, METRICS_PORT, HEALTH_PORT, ZOOKEEPER_PORT} <= exposed,
        f"EXPOSE lacks the client, peer, metrics, health or ZooKeeper port: {sorted(exposed)}",
    )

    bins = workspace_bins(root)
    runs = " ".join(i["value"] for i in parser.structure if i["instruction"] == "RUN")
    built = re.findall(r"--bin\s+(\S+)", runs)
    check({"concord", "concordctl"} <= set(built), f"the builder does not build both binaries: {built}")
    for b in built:
        check(b in bins, f"--bin {b} is not a binary of the workspace ({sorted(bins)})")
    check("cargo build --profile dist --locked" in runs, "the build is not `cargo build --profile dist --locked` (the shipped profile)")

    patterns = dockerignored(root)
    for p in ("target", ".venv", "bench/out"):
        check(ignored(p, patterns), f".dockerignore does not keep {p} out")
    copied = set()
    for from_value, instrs in all_stages:
        for i in instrs:
            if i["instruction"] not in ("COPY", "ADD") or "--from=" in i["value"]:
                continue
            words = [w for w in i["value"].split() if not w.startswith("--")]
            for source in words[:-1]:
                copied.add(source.rstrip("/"))
                check((root / source).exists(), f"COPY source {source} does not exist")
                check(not ignored(source, patterns), f"COPY source {source} is excluded by .dockerignore")
    # `--locked` needs every member's manifest: a member left out fails the build.
    for member in workspace_members(root):
        check(member in copied, f"workspace member {member} is not copied into the builder")


# --- Prometheus alerting rules ---------------------------------------------------

SEVERITIES = {"critical", "warning", "info"}
DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def documented_metrics(root):
    """name -> type of every metric in docs/operations.md's Metrics table."""
    doc = (root / "docs" / "operations.md").read_text()
    section = doc.split("\n## Metrics\n", 1)[-1].split("\n## ", 1)[0]
    metrics = {}
    for m in re.finditer(r"^\| `(concord_[a-z0-9_]+)` \| (\w+) \|", section, re.MULTILINE):
        metrics[m.group(1)] = m.group(2)
    return metrics


def metric_names(expr):
    """The concord_ metric names an expression selects (quoted label values skipped)."""
    unquoted = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(re.findall(r"(?<![A-Za-z0-9_:])concord_[A-Za-z0-9_:]*", unquoted))


def check_metric_name(name, metrics, where):
    """A name an expression selects must be a documented series: a counter or gauge
    by its name, a histogram only through its _bucket, _sum or _count series."""
    if metrics.get(name) in ("counter", "gauge"):
        return
    for suffix in HISTOGRAM_SUFFIXES:
        if name.endswith(suffix) and metrics.get(name.removesuffix(suffix)) == "histogram":
            return
    kind = metrics.get(name)
    why = f"a {kind} (use {name}_bucket, _sum or _count)" if kind else "not a documented metric"
    failures.append(f"{where}: {name} is {why}")


def check_rule(rule, metrics, where):
    for key in ("alert", "expr", "for"):
        check(isinstance(rule.get(key), str) and rule[key].strip(), f"{where}: no `{key}`")
    check(DURATION.match(str(rule.get("for", ""))), f"{where}: `for` {rule.get('for')!r} is not a duration")
    labels = rule.get("labels") or {}
    check(labels.get("severity") in SEVERITIES, f"{where}: severity {labels.get('severity')!r} not in {sorted(SEVERITIES)}")
    annotations = rule.get("annotations") or {}
    for key in ("summary", "description"):
        check(isinstance(annotations.get(key), str) and annotations[key].strip(), f"{where}: no annotations.{key}")
    for name in sorted(metric_names(str(rule.get("expr", "")))):
        check_metric_name(name, metrics, where)


def run_promtool(*args):
    try:
        done = subprocess.run(["promtool", *args], capture_output=True, text=True)
    except FileNotFoundError:
        failures.append("promtool not found (Debian package prometheus; scripts/test.sh installs it)")
        return
    check(done.returncode == 0, f"promtool {' '.join(args)}:\n{done.stdout}{done.stderr}")


def check_alerts(root):
    """deploy/prometheus/concord-alerts.yaml: promtool's syntax check and unit tests,
    every rule complete, every metric documented, and the alerts those that
    docs/operations.md explains under "Alerts worth setting"."""
    folder = root / "deploy" / "prometheus"
    rules_file, tests_file = folder / "concord-alerts.yaml", folder / "concord-alerts.test.yaml"
    run_promtool("check", "rules", str(rules_file))
    run_promtool("test", "rules", str(tests_file))
    metrics = documented_metrics(root)
    check(len(metrics) > 30, f"the Metrics table of docs/operations.md was not found: {metrics}")
    groups = (yaml.safe_load(rules_file.read_text()) or {}).get("groups") or []
    alerts = []
    for group in groups:
        check(bool(group.get("name")), "a rule group without a name")
        for i, rule in enumerate(group.get("rules") or []):
            where = f"{rules_file.name}: {group.get('name')}[{i}] {rule.get('alert', '')}".rstrip()
            check("record" not in rule, f"{where}: a recording rule (alerts only here)")
            check_rule(rule, metrics, where)
            alerts.append(rule.get("alert"))
    check(len(alerts) == len(set(alerts)), f"alert names repeat: {sorted(alerts)}")
    doc = (root / "docs" / "operations.md").read_text()
    section = doc.split("\n## Alerts worth setting\n", 1)
    if check(len(section) == 2, 'docs/operations.md has no "Alerts worth setting" section'):
        explained = set(re.findall(r"\*\*(Concord\w+)\*\*", section[1].split("\n## ", 1)[0]))
        check(explained == set(alerts), f"alerts explained in docs/operations.md but not in the file: "
              f"{sorted(explained - set(alerts))}; in the file but not explained: {sorted(set(alerts) - explained)}")
    return len(alerts)


# --- Kubernetes ------------------------------------------------------------------


def load_manifests(folder):
    resources = []
    for path in sorted(folder.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                resources.append((path.name, doc))
    return resources


def validate_schemas(resources):
    versions = [K8S_OLDEST, kubernetes_validate.utils.latest_version()]
    for version in versions:
        for name, doc in resources:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except Exception as e:  # the library raises several kinds
                failures.append(f"{name}: {doc.get('kind')}/{doc['metadata'].get('name')} against {version}: {e}")
    return versions


def one(resources, kind, pred=lambda d: True):
    found = [d for _, d in resources if d["kind"] == kind and pred(d)]
    check(len(found) == 1, f"expected one {kind}, found {len(found)}")
    return found[0] if found else None


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def port_number(container, port):
    """A probe's port (a name or a number) as the container's port number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    return None


def check_statefulset(sts, resources):
    spec = sts["spec"]
    pod = spec["template"]
    labels = pod["metadata"]["labels"]
    namespace = sts["metadata"].get("namespace", "default")
    check(spec.get("replicas") == 3, f"StatefulSet replicas is {spec.get('replicas')}, not 3")
    check(selects(spec["selector"]["matchLabels"], labels), "the StatefulSet's selector does not match its pods")
    check(
        spec.get("podManagementPolicy") == "Parallel",
        "podManagementPolicy is not Parallel (OrderedReady never starts a quorum)",
    )

    headless = one(resources, "Service", lambda d: d["metadata"]["name"] == spec.get("serviceName"))
    if headless:
        hs = headless["spec"]
        check(hs.get("clusterIP") == "None", "the serviceName Service is not headless")
        check(hs.get("publishNotReadyAddresses") is True, "the headless Service does not publish not-ready pods")
        check(selects(hs.get("selector"), labels), "the headless Service does not select the pods")
    clients = [
        d for _, d in resources
        if d["kind"] == "Service" and d["metadata"]["name"] != spec.get("serviceName")
    ]
    check(
        any(selects(c["spec"].get("selector"), labels) and c["spec"].get("clusterIP") != "None"
            and not c["spec"].get("publishNotReadyAddresses") for c in clients),
        "no client Service that selects the ready pods",
    )
    check(
        any({p.get("port") for p in c["spec"].get("ports", [])} >= {CLIENT_PORT, ZOOKEEPER_PORT} for c in clients),
        "no client Service offers both the gRPC and the ZooKeeper port",
    )

    pdb = one(resources, "PodDisruptionBudget")
    if pdb:
        check(pdb["spec"].get("maxUnavailable") == 1, "the PDB's maxUnavailable is not 1")
        check(selects(pdb["spec"]["selector"]["matchLabels"], labels), "the PDB does not select the pods")

    ps = pod["spec"]
    terms = ps.get("affinity", {}).get("podAntiAffinity", {})
    keys = [t.get("topologyKey") for t in terms.get("requiredDuringSchedulingIgnoredDuringExecution", [])]
    keys += [t["podAffinityTerm"].get("topologyKey") for t in terms.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
    check("kubernetes.io/hostname" in keys, "no pod anti-affinity on kubernetes.io/hostname")
    check(ps.get("securityContext", {}).get("runAsNonRoot") is True, "the pod does not set runAsNonRoot")
    check("terminationGracePeriodSeconds" in ps, "no terminationGracePeriodSeconds")

    (container,) = [c for c in ps["containers"] if c["name"] == "concord"]
    script = " ".join(container.get("command", []) + container.get("args", []))
    check(
        container.get("securityContext", {}).get("readOnlyRootFilesystem") is True,
        "the container's root filesystem is writable",
    )
    check("limits" in container.get("resources", {}) and "requests" in container["resources"], "no resource requests and limits")
    ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
    want = {
        "client": CLIENT_PORT,
        "peer": PEER_PORT,
        "metrics": METRICS_PORT,
        "health": HEALTH_PORT,
        "zookeeper": ZOOKEEPER_PORT,
    }
    check(ports == want, f"container ports: {ports}")
    m = re.search(r"--zookeeper-addr\s+0\.0\.0\.0:(\d+)", script)
    check(m is not None and int(m.group(1)) == ZOOKEEPER_PORT, "the server does not bind the ZooKeeper port on 0.0.0.0")
    m = re.search(r"--metrics-addr\s+0\.0\.0\.0:(\d+)", script)
    check(m is not None and int(m.group(1)) == METRICS_PORT, "the server does not bind the metrics port on 0.0.0.0")
    m = re.search(r"--health-addr\s+0\.0\.0\.0:(\d+)", script)
    check(m is not None and int(m.group(1)) == HEALTH_PORT, "the server does not bind the health port on 0.0.0.0")
    check("--insecure" not in script, "the server runs with --insecure")
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container.get(probe, {}).get("httpGet", {})
        check(get.get("path") == path, f"{probe} is not on {path}")
        check(get.get("scheme", "HTTP") == "HTTP", f"{probe} is not plain HTTP")
        check(port_number(container, get.get("port")) == HEALTH_PORT, f"{probe} is not on the health port")
    check("--server-id" in script and "HOSTNAME" in script, "the server id is not derived from the pod's hostname")
    check_start_script(container)

    mounts = {v["name"]: v for v in container.get("volumeMounts", [])}
    claims = {c["metadata"]["name"] for c in spec.get("volumeClaimTemplates", [])}
    volumes = {v["name"]: v for v in ps.get("volumes", [])}
    secrets = [n for n, v in volumes.items() if "secret" in v]
    check(len(secrets) == 1, f"expected the TLS material from one Secret volume, found {secrets}")
    for name in secrets:
        mount = mounts.get(name, {})
        check(mount.get("readOnly") is True, "the TLS Secret is not mounted read-only")
        check("subPath" not in mount, "the TLS Secret is mounted with subPath (its updates would never land)")
        tls_dir = mount.get("mountPath", "")
        check(f"--peer-cert-file \"{tls_dir}/" in script.replace("$tls", tls_dir), "the peer certificate does not come from the Secret")
    config = check_config(resources, volumes, mounts, script, spec.get("serviceName"), namespace)
    if config:
        data_dir = config.get("data_dir", "")
        check(
            any(mounts.get(c, {}).get("mountPath") == data_dir for c in claims),
            f"data_dir {data_dir} is not on a volumeClaimTemplate",
        )


def check_start_script(container):
    """Runs the container's start command with /bin/sh (the image's shell is dash,
    as here) and a stand-in `concord` that prints its arguments: pod concord-N must
    start as server N+1 with member N+1's certificate files, and a hostname
    without an ordinal must fail."""
    command = container.get("command", []) + container.get("args", [])
    if not check(command[:2] == ["/bin/sh", "-c"] and len(command) == 3, f"the start command is not `/bin/sh -c SCRIPT`: {command[:2]}"):
        return
    with tempfile.TemporaryDirectory() as tmp:
        fake = Path(tmp) / "concord"
        fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
        fake.chmod(0o755)
        env = {"PATH": f"{tmp}:/usr/bin:/bin"}
        for ordinal in range(3):
            run = subprocess.run(command, env={**env, "HOSTNAME": f"concord-{ordinal}"}, capture_output=True, text=True)
            args = run.stdout.splitlines()
            want = ordinal + 1
            if not check(run.returncode == 0, f"the start script fails for concord-{ordinal}: {run.stderr.strip()}"):
                continue
            pairs = dict(zip(args, args[1:]))
            check(pairs.get("--server-id") == str(want), f"concord-{ordinal} starts as server {pairs.get('--server-id')}, not {want}")
            for flag, name in (("--peer-cert-file", f"peer-{want}.pem"), ("--peer-key-file", f"peer-{want}-key.pem"),
                               ("--cert-file", f"server-{want}.pem"), ("--key-file", f"server-{want}-key.pem")):
                check(pairs.get(flag, "").endswith("/" + name), f"concord-{ordinal}: {flag} is {pairs.get(flag)}, not {name}")
        bad = subprocess.run(command, env={**env, "HOSTNAME": "concord"}, capture_output=True, text=True)
        check(bad.returncode != 0 and not bad.stdout, "the start script runs a server for a hostname without an ordinal")


def check_config(resources, volumes, mounts, script, service, namespace):
    """The TOML in the ConfigMap the server reads: members are the pods' DNS names."""
    m = re.search(r"--config\s+(\S+)", script)
    if not check(m is not None, "the server is not given --config"):
        return None
    path = Path(m.group(1))
    source = [n for n, mount in mounts.items() if mount["mountPath"] == str(path.parent)]
    if not check(len(source) == 1 and "configMap" in volumes.get(source[0], {}), "--config is not from a ConfigMap"):
        return None
    cm_name = volumes[source[0]]["configMap"]["name"]
    cm = one(resources, "ConfigMap", lambda d: d["metadata"]["name"] == cm_name)
    if not cm:
        return None
    config = tomllib.loads(cm["data"][path.name])
    check("server_id" not in config, "the shared config sets server_id (each member takes it by flag)")
    check(config.get("client_addr") == f"0.0.0.0:{CLIENT_PORT}", "client_addr does not bind the client port")
    check(config.get("peer_addr") == f"0.0.0.0:{PEER_PORT}", "peer_addr does not bind the peer port")
    members = config.get("members", [])
    check([m.get("id") for m in members] == [1, 2, 3], f"member ids: {[m.get('id') for m in members]}")
    for m in members:
        host = f"concord-{m['id'] - 1}.{service}.{namespace}.svc.cluster.local"
        check(m.get("client_addr") == f"{host}:{CLIENT_PORT}", f"member {m['id']} client_addr {m.get('client_addr')}")
        check(m.get("peer_addr") == f"{host}:{PEER_PORT}", f"member {m['id']} peer_addr {m.get('peer_addr')}")
        check(m.get("role") == "voter", f"member {m['id']} is not a voter")
    return config


def check_k8s(root):
    folder = root / "deploy" / "k8s"
    resources = load_manifests(folder)
    check(bool(resources), f"no manifests in {folder}")
    versions = validate_schemas(resources)
    for name, doc in resources:
        if doc["kind"] != "Namespace":
            check(doc["metadata"].get("namespace") == "concord", f"{name}: {doc['kind']} is not in namespace concord")
    sts = one(resources, "StatefulSet")
    if sts:
        check_statefulset(sts, resources)
    return len(resources), versions


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
    check_dockerfile(root)
    count, versions = check_k8s(root)
    alerts = check_alerts(root)
    if failures:
        print("deploy checks failed:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(
        f"deploy checks: Dockerfile ok; {count} Kubernetes resources valid against {', '.join(versions)}, "
        f"invariants ok; {alerts} Prometheus alerts valid, unit tests pass, metrics documented"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
