#!/usr/bin/env python3
"""Structural checks of deploy/kubernetes, on what `kubectl apply -k` would apply.

    lint_k8s.py KUSTOMIZATION_DIR RENDERED.yaml|- [RENDERED_NEW_IMAGE.yaml]

RENDERED is the output of `kubectl kustomize DIR`, or "-" to assemble the resources here
(the listed files plus the generated ConfigMap, without its hash suffix) when kubectl is
missing. RENDERED_NEW_IMAGE, when given, is the same kustomization rendered with another
image: the second `kubectl apply -k` of a release. Writes outboxd.toml and migrate.toml of
the ConfigMap next to RENDERED (or into $LINT_TMP) for `outboxd config check`.
"""

import os
import re
import sys
import tomllib

import yaml

root = sys.argv[1]
rendered_path = sys.argv[2]
second_path = sys.argv[3] if len(sys.argv) > 3 else None
errors = []


def err(msg):
    errors.append(msg)


def seconds(text):
    """humantime subset used in the config: 500ms, 30s, 5m, 24h, 7d (also combined)."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    parts = re.findall(r"(\d+)\s*(ms|s|m|h|d)", text)
    if not parts or re.sub(r"(\d+)\s*(ms|s|m|h|d)|\s", "", text):
        raise ValueError(f"unparseable duration {text!r}")
    return sum(int(n) * units[u] for n, u in parts)


def load_all(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except (OSError, yaml.YAMLError) as e:
        err(f"{path}: not valid YAML: {e}")
        return []


kust = yaml.safe_load(open(os.path.join(root, "kustomization.yaml")))
listed = kust.get("resources") or []


def assemble():
    """What kustomize would render, minus the hash suffix and the namespace transformer."""
    docs = []
    for r in listed:
        docs += load_all(os.path.join(root, r))
    for gen in kust.get("configMapGenerator") or []:
        data = {}
        for spec in gen.get("files") or []:
            key, _, path = spec.partition("=")
            if not path:
                key, path = os.path.basename(spec), spec
            data[key] = open(os.path.join(root, path)).read()
        docs.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": gen["name"], "namespace": kust.get("namespace"),
                         "labels": (gen.get("options") or {}).get("labels") or {}},
            "data": data,
        })
    return docs


docs = assemble() if rendered_path == "-" else load_all(rendered_path)
by_kind = {}
for d in docs:
    if not isinstance(d, dict):
        err("a rendered document is not a mapping")
        continue
    for key in ("apiVersion", "kind"):
        if not d.get(key):
            err(f"a rendered object lacks {key}")
    meta = d.get("metadata") or {}
    if not meta.get("name"):
        err(f"{d.get('kind')}: missing metadata.name")
    if d.get("kind") != "Namespace" and meta.get("namespace") != "outboxd":
        err(f"{d.get('kind')}/{meta.get('name')} not in namespace outboxd")
    by_kind.setdefault(d.get("kind"), []).append(d)
print("rendered: " + ", ".join(
    f"{d.get('kind')}/{(d.get('metadata') or {}).get('name')}" for d in docs))

for kind in ("Job", "CronJob"):
    if by_kind.get(kind):
        err(f"a {kind} is in the rendered resources: its pod template is immutable, so the "
            "next release's `kubectl apply -k` would fail (run migrations in the init container)")


def one(kind):
    found = by_kind.get(kind) or []
    if len(found) != 1:
        err(f"expected exactly one {kind}, found {len(found)}")
        return {}
    return found[0]


def container_checks(where, c):
    csc = c.get("securityContext") or {}
    if csc.get("allowPrivilegeEscalation") is not False:
        err(f"{where}: allowPrivilegeEscalation is not false")
    if csc.get("readOnlyRootFilesystem") is not True:
        err(f"{where}: readOnlyRootFilesystem is not true")
    if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
        err(f"{where}: capabilities.drop lacks ALL")
    res = c.get("resources") or {}
    limit = (res.get("limits") or {}).get("memory")
    if not limit:
        err(f"{where}: no memory limit")
    elif (res.get("requests") or {}).get("memory") != limit:
        err(f"{where}: memory request {(res.get('requests') or {}).get('memory')} != limit {limit}")
    args = c.get("args") or []
    if "--config" not in args:
        err(f"{where}: no --config argument")
        return None
    cfg = args[args.index("--config") + 1]
    if os.path.dirname(cfg) not in {m["mountPath"] for m in c.get("volumeMounts") or []}:
        err(f"{where}: --config {cfg} is not under a volumeMount")
    return os.path.basename(cfg)


# Deployment
dep = one("Deployment")
grace, pod_labels, pod, main, init = None, {}, {}, {}, {}
if dep:
    spec, tmpl = dep["spec"], dep["spec"]["template"]
    pod = tmpl["spec"]
    pod_labels = tmpl["metadata"].get("labels") or {}
    if any(pod_labels.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
        err("Deployment: selector does not match the pod template labels")
    if spec.get("replicas", 1) < 2:
        err("Deployment: fewer than 2 replicas")
    grace = pod.get("terminationGracePeriodSeconds")
    if not isinstance(grace, int) or grace <= 20:
        err(f"Deployment: terminationGracePeriodSeconds {grace!r} is not > 20 (shutdown_grace)")
    sc = pod.get("securityContext") or {}
    if sc.get("runAsNonRoot") is not True:
        err("Deployment: pod securityContext.runAsNonRoot is not true")
    if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        err("Deployment: pod seccompProfile is not RuntimeDefault")
    main = (pod.get("containers") or [{}])[0]
    main_cfg = container_checks("Deployment container outboxd", main)
    if not any((e.get("secretRef") or {}).get("name") == "outboxd-secrets"
               for e in main.get("envFrom") or []):
        err("Deployment container outboxd: does not load the outboxd-secrets Secret")
    ports = {p.get("name"): p.get("containerPort") for p in main.get("ports") or []}
    for probe, path in {"livenessProbe": "/healthz", "readinessProbe": "/readyz"}.items():
        got = (main.get(probe) or {}).get("httpGet") or {}
        if got.get("path") != path:
            err(f"Deployment: {probe} path is {got.get('path')!r}, expected {path}")
        if ports.get(got.get("port"), got.get("port")) != 8080:
            err(f"Deployment: {probe} port {got.get('port')!r} is not 8080")
    args = main.get("args") or []
    if args[:1] != ["run"] or "--skip-migrations" not in args:
        err(f"Deployment: container args {args} are not `run --skip-migrations ...`")
    ann = tmpl["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics":
        err("Deployment: prometheus scrape annotations missing")
    if ports.get("metrics") != 9464 or ann.get("prometheus.io/port") != "9464":
        err("Deployment: no container port `metrics` 9464 scraped by the annotations "
            "([admin] metrics_listen)")
    if not pod.get("topologySpreadConstraints") and not (pod.get("affinity") or {}).get("podAntiAffinity"):
        err("Deployment: no topologySpreadConstraints or podAntiAffinity")
    # The migrate init container: same image, `migrate`, database credentials only.
    inits = [c for c in pod.get("initContainers") or [] if "migrate" in (c.get("args") or [])]
    if len(inits) != 1:
        err(f"Deployment: expected one init container running `outboxd migrate`, found {len(inits)}")
    else:
        init = inits[0]
        init_cfg = container_checks(f"Deployment init container {init.get('name')}", init)
        if init.get("image") != main.get("image"):
            err("Deployment: the migrate init container and the dispatcher run different images")
        if init.get("envFrom"):
            err("migrate init container: envFrom loads whole Secrets/ConfigMaps; name the "
                "database credentials one by one")
        init_env = {e.get("name"): e for e in init.get("env") or []}
        if init_cfg == main_cfg:
            err("migrate init container reads the dispatcher's configuration (all secrets)")
    print(f"ok: Deployment (replicas {dep['spec'].get('replicas')}, grace {grace}s, "
          f"init container {init.get('name')!r} runs {init.get('args')}, probes, non-root)")

# PodDisruptionBudget and Service select the Deployment's pods.
pdb = one("PodDisruptionBudget")
if pdb:
    s = pdb["spec"]
    if "minAvailable" not in s and "maxUnavailable" not in s:
        err("PodDisruptionBudget: neither minAvailable nor maxUnavailable")
    if any(pod_labels.get(k) != v for k, v in s["selector"]["matchLabels"].items()):
        err("PodDisruptionBudget: selector does not match the Deployment's pods")
svc = one("Service")
if svc and main:
    if any(pod_labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        err("Service: selector does not match the Deployment's pods")
    cports = {p.get("name"): p.get("containerPort") for p in main.get("ports") or []}
    for p in svc["spec"]["ports"]:
        if cports.get(p.get("targetPort"), p.get("targetPort")) != 8080:
            err(f"Service: targetPort {p.get('targetPort')!r} is not the container's 8080")
print("ok: PodDisruptionBudget and Service select the Deployment's pods")

# NetworkPolicy: ingress to the admin port; egress DNS, PostgreSQL, HTTPS.
np = one("NetworkPolicy")
if np:
    s = np["spec"]
    if any(pod_labels.get(k) != v for k, v in (s.get("podSelector") or {}).get("matchLabels", {}).items()):
        err("NetworkPolicy: podSelector does not match the Deployment's pods")
    if sorted(s.get("policyTypes") or []) != ["Egress", "Ingress"]:
        err("NetworkPolicy: policyTypes must be Ingress and Egress")
    ingress_ports = {p.get("port") for r in s.get("ingress") or [] for p in r.get("ports") or []}
    if ingress_ports != {8080, 9464}:
        err(f"NetworkPolicy: ingress ports {ingress_ports}, expected the admin port 8080 and "
            "the metrics port 9464 only")
    for r in s.get("ingress") or []:
        rule_ports = {p.get("port") for p in r.get("ports") or []}
        from_monitoring = any((f.get("namespaceSelector") or {}).get("matchLabels", {})
                              .get("kubernetes.io/metadata.name") == "monitoring"
                              for f in r.get("from") or [])
        if from_monitoring and 8080 in rule_ports:
            err("NetworkPolicy: the monitoring namespace may reach the admin API's port 8080; "
                "it needs only the metrics port 9464")
    egress_ports = {p.get("port") for r in s.get("egress") or [] for p in r.get("ports") or []}
    for port, what in ((53, "DNS"), (5432, "PostgreSQL"), (443, "providers' HTTPS")):
        if port not in egress_ports:
            err(f"NetworkPolicy: no egress to {what} (port {port})")
    print(f"ok: NetworkPolicy (ingress {sorted(ingress_ports)}, egress {sorted(egress_ports)})")

# Secret example (a file, not rendered): placeholders only.
values = {}
for sec in load_all(os.path.join(root, "secret.example.yaml")):
    values = {**(sec.get("stringData") or {}), **(sec.get("data") or {})}
    for k, v in values.items():
        if "CHANGE-ME" not in str(v):
            err(f"secret.example.yaml: {k} is not marked as a placeholder (CHANGE-ME)")
print(f"ok: secret.example.yaml holds placeholders only ({', '.join(values)})")

# PodMonitor (optional, applied on its own): selects the pods' admin port.
for pm in load_all(os.path.join(root, "podmonitor.yaml")):
    s = pm.get("spec") or {}
    if any(pod_labels.get(k) != v for k, v in (s.get("selector") or {}).get("matchLabels", {}).items()):
        err("PodMonitor: selector does not match the Deployment's pods")
    eps = s.get("podMetricsEndpoints") or []
    if not eps or eps[0].get("port") != "metrics" or eps[0].get("path") != "/metrics":
        err("PodMonitor: first endpoint is not port metrics, path /metrics")
    if s.get("jobLabel") != "app.kubernetes.io/name" or pod_labels.get("app.kubernetes.io/name") != "outboxd":
        err("PodMonitor: job label would not be outboxd (the rules use job=\"outboxd\")")
    print("ok: podmonitor.yaml scrapes port metrics /metrics as job outboxd")


def env_names(node, out):
    if isinstance(node, dict):
        for k, v in node.items():
            if k.endswith("_env") and isinstance(v, str):
                out.add(v)
            env_names(v, out)
    elif isinstance(node, list):
        for v in node:
            env_names(v, out)
    return out


# The generated ConfigMap: outboxd.toml and migrate.toml.
cm = one("ConfigMap")
vol_cm = next((v["configMap"]["name"] for v in pod.get("volumes") or [] if "configMap" in v), None)
if cm and vol_cm != cm["metadata"]["name"]:
    err(f"Deployment mounts ConfigMap {vol_cm}, the rendered one is {cm['metadata']['name']}")
data = (cm or {}).get("data") or {}
out_dir = os.environ.get("LINT_TMP") or os.path.dirname(os.path.abspath(rendered_path))
cfgs = {}
for key in ("outboxd.toml", "migrate.toml"):
    if key not in data:
        err(f"ConfigMap: no {key} key")
        continue
    try:
        cfgs[key] = tomllib.loads(data[key])
    except tomllib.TOMLDecodeError as e:
        err(f"ConfigMap {key}: invalid TOML: {e}")
    with open(os.path.join(out_dir, key), "w") as f:
        f.write(data[key])
cfg, mig = cfgs.get("outboxd.toml"), cfgs.get("migrate.toml")
if cfg:
    db = cfg.get("database", {})
    if not str(db.get("url", "")).startswith(("postgres://", "postgresql://")):
        err("outboxd.toml: database.url is not PostgreSQL (replicas need PostgreSQL)")
    if re.search(r"://[^/@]*:[^/@]*@", str(db.get("url", ""))):
        err("outboxd.toml: database.url contains a password")
    if cfg.get("admin", {}).get("listen") != "0.0.0.0:8080":
        err("outboxd.toml: admin.listen is not 0.0.0.0:8080")
    if cfg.get("admin", {}).get("metrics_listen") != "0.0.0.0:9464":
        err("outboxd.toml: admin.metrics_listen is not 0.0.0.0:9464 (the container's metrics port)")
    d = cfg.get("dispatcher", {})
    lease = seconds(d.get("lease", "30s"))
    sgrace = seconds(d.get("shutdown_grace", "20s"))
    if grace is not None and sgrace >= grace:
        err(f"shutdown_grace {sgrace}s is not below terminationGracePeriodSeconds {grace}s")
    if sgrace >= lease:
        err(f"shutdown_grace {sgrace}s is not below lease {lease}s")
    # outboxd only warns; here it is a failure. A claim never exceeds `concurrency`, so
    # each claimed intent is sent at once and the lease has to cover one attempt.
    for name, p in cfg.get("providers", {}).items():
        need = seconds(p.get("connect_timeout", "5s")) + seconds(p.get("request_timeout", "30s"))
        if lease <= need:
            err(f"lease {lease}s is not above providers.{name} connect+request timeout {need}s")
    names = env_names(cfg, set())
    missing = names - set(values)
    if missing:
        err(f"secret.example.yaml lacks variables named by *_env keys: {sorted(missing)}")
    if "issue_refund" not in cfg.get("actions", {}):
        err("outboxd.toml: no issue_refund action")
    print(f"ok: outboxd.toml: lease {lease:g}s > connect+request timeouts; shutdown_grace "
          f"{sgrace:g}s < grace {grace}s; *_env vars {sorted(names)} in the Secret")
if cfg and mig:
    for key in ("url", "password_env", "password_file"):
        if cfg.get("database", {}).get(key) != mig.get("database", {}).get(key):
            err(f"migrate.toml database.{key} differs from outboxd.toml's")
    if set(mig) - {"database", "logging"}:
        err(f"migrate.toml has sections beyond [database] and [logging]: {sorted(set(mig))}")
    mig_names = env_names(mig, set())
    if init and set(init_env) != mig_names:
        err(f"migrate init container env {sorted(init_env)} != migrate.toml's *_env {sorted(mig_names)}")
    for name, e in init_env.items():
        ref = (e.get("valueFrom") or {}).get("secretKeyRef") or {}
        if ref.get("key") != name or ref.get("name") != "outboxd-secrets":
            err(f"migrate init container: {name} is not taken from outboxd-secrets key {name}")
    print(f"ok: migrate.toml names the same database; the init container gets only {sorted(init_env)}")

# Every manifest in the directory is either listed or deliberately applied on its own.
for f in sorted(os.listdir(root)):
    if f.endswith(".yaml") and f not in listed and f not in (
            "kustomization.yaml", "secret.example.yaml", "podmonitor.yaml"):
        err(f"kustomization.yaml does not list {f}")
for r in listed:
    if not os.path.exists(os.path.join(root, r)):
        err(f"kustomization.yaml lists missing {r}")

# The second apply of a release: only the Deployment's (mutable) pod template changes.
if second_path:
    new = load_all(second_path)
    ident = lambda d: (d.get("kind"), d["metadata"].get("name"))  # noqa: E731
    before, after = {ident(d): d for d in docs}, {ident(d): d for d in new}
    if set(before) != set(after):
        err(f"a new image changes the set of objects: {sorted(set(before) ^ set(after))}")
    changed = sorted(k for k in before if k in after and before[k] != after[k])
    if changed != [("Deployment", "outboxd")]:
        err(f"a new image changes {changed}, expected only Deployment/outboxd")
    else:
        a, b = before[changed[0]], after[changed[0]]
        if a["spec"]["selector"] != b["spec"]["selector"]:
            err("a new image changes the Deployment's (immutable) selector")
        imgs = {c.get("image") for c in b["spec"]["template"]["spec"]["initContainers"]
                + b["spec"]["template"]["spec"]["containers"]}
        print(f"ok: a second apply with a new image changes only Deployment/outboxd "
              f"(images now {sorted(imgs)}); no Job, nothing immutable")

if errors:
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    sys.exit(1)
