#!/usr/bin/env bash
# Lints the deployment files with what a Debian machine usually has, no network needed:
#
#   deploy/lint.sh [OUTBOXD_BINARY]
#
#  1. systemd/outboxd.service: `systemd-analyze verify` on a temporary copy whose
#     ExecStart/ExecStartPre point at OUTBOXD_BINARY (or /bin/true, since /usr/bin/outboxd
#     is usually absent on a dev machine), plus the offline exposure score of
#     `systemd-analyze security`. Skipped, with a message, without systemd-analyze.
#  2. kubernetes/*.yaml: parsed with PyYAML and checked for structure (see check_k8s below);
#     the embedded outboxd.toml is parsed with tomllib and its timing invariants checked.
#  3. kubernetes/: `kubectl kustomize` renders (offline) when kubectl is installed.
#  4. Dockerfile: the runtime contract (non-root uid 10001, EXPOSE 8080, ENTRYPOINT/CMD).
#     hadolint is not used (not packaged for Debian).
#  5. With OUTBOXD_BINARY: `outboxd config check` on the ConfigMap's outboxd.toml, with the
#     placeholder values of secret.example.yaml as environment.
#
# Exits non-zero on the first failing check; skipped checks are listed at the end.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
unit="$here/systemd/outboxd.service"
k8s="$here/kubernetes"
binary="${1:-}"
skipped=()

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

section() { printf '\n== %s\n' "$*"; }
skip() { printf 'SKIPPED: %s\n' "$*"; skipped+=("$*"); }
fail() { printf 'FAILED: %s\n' "$*" >&2; exit 1; }

if [[ -n "$binary" ]]; then
    [[ -x "$binary" ]] || fail "$binary is not an executable file"
    binary="$(cd "$(dirname "$binary")" && pwd)/$(basename "$binary")"
fi

# --------------------------------------------------------------------------------------
section "systemd unit: $unit"
if ! command -v systemd-analyze >/dev/null 2>&1; then
    skip "systemd-analyze not installed (apt-get install systemd); unit not verified"
else
    exe="${binary:-/bin/true}"
    # Same file name, so the unit name (and %n, %d) are unchanged.
    sed -e "s#^ExecStartPre=/usr/bin/outboxd #ExecStartPre=$exe #" \
        -e "s#^ExecStart=/usr/bin/outboxd #ExecStart=$exe #" \
        "$unit" > "$tmp/outboxd.service"
    grep -q "^ExecStart=$exe " "$tmp/outboxd.service" || fail "ExecStart= not rewritten"
    grep -q "^ExecStartPre=$exe " "$tmp/outboxd.service" || fail "ExecStartPre= not rewritten"
    echo "\$ systemd-analyze verify --man=no $tmp/outboxd.service   (Exec* -> $exe)"
    # verify prints problems but does not always exit non-zero for them: fail on any
    # line that mentions the unit.
    set +e
    out="$(systemd-analyze verify --man=no "$tmp/outboxd.service" 2>&1)"
    rc=$?
    set -e
    [[ -n "$out" ]] && printf '%s\n' "$out"
    if (( rc != 0 )) || grep -q "outboxd.service" <<<"$out"; then
        fail "systemd-analyze verify reported problems (exit $rc)"
    fi
    echo "ok: systemd-analyze verify (exit 0, no findings)"

    if systemd-analyze security --help 2>/dev/null | grep -q -- '--offline'; then
        set +e
        sec="$(systemd-analyze security --offline=yes --threshold=30 --no-pager \
               "$tmp/outboxd.service" 2>&1)"
        rc=$?
        set -e
        overall="$(grep -E 'Overall exposure level' <<<"$sec" || true)"
        [[ -n "$overall" ]] || { printf '%s\n' "$sec"; fail "systemd-analyze security gave no score"; }
        echo "$overall"
        # 3.0 = "OK" on systemd's scale (0 = most restricted, 10 = unrestricted).
        (( rc == 0 )) || { printf '%s\n' "$sec" | grep -E '^✗' || true; fail "exposure above 3.0"; }
        echo "ok: systemd-analyze security --offline exposure <= 3.0"
    else
        skip "systemd-analyze security --offline unsupported by this systemd"
    fi
fi

# --------------------------------------------------------------------------------------
section "Kubernetes manifests: $k8s"
have_yaml=0
if python3 -c 'import yaml' 2>/dev/null; then
    have_yaml=1
else
    echo "PyYAML missing; trying: pip install --quiet pyyaml"
    if python3 -m pip install --quiet pyyaml >/dev/null 2>&1 && python3 -c 'import yaml' 2>/dev/null; then
        have_yaml=1
    fi
fi
if (( have_yaml == 0 )); then
    skip "PyYAML unavailable; YAML manifests NOT checked"
else
    python3 - "$k8s" <<'PY'
import glob, os, re, sys, tomllib
import yaml

root = sys.argv[1]
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

docs = {}      # (kind, name) -> (file, doc)
by_file = {}
for path in sorted(glob.glob(os.path.join(root, "*.yaml"))):
    name = os.path.basename(path)
    try:
        loaded = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    except yaml.YAMLError as e:
        err(f"{name}: not valid YAML: {e}")
        continue
    if not loaded:
        err(f"{name}: no YAML document")
    by_file[name] = loaded
    for d in loaded:
        if not isinstance(d, dict):
            err(f"{name}: a document is not a mapping")
            continue
        if d.get("kind") == "Kustomization":
            continue
        for key in ("apiVersion", "kind"):
            if not d.get(key):
                err(f"{name}: missing {key}")
        meta_name = (d.get("metadata") or {}).get("name")
        if not meta_name:
            err(f"{name}: missing metadata.name")
        if d.get("kind") != "Namespace" and (d.get("metadata") or {}).get("namespace") != "outboxd":
            err(f"{name}: {d.get('kind')}/{meta_name} not in namespace outboxd")
        docs[(d.get("kind"), meta_name)] = (name, d)
    print(f"parsed {name}: " + ", ".join(
        f"{d.get('kind')}/{(d.get('metadata') or {}).get('name', '-')}" for d in loaded))

def one(kind):
    found = [v for (k, _), v in docs.items() if k == kind]
    if len(found) != 1:
        err(f"expected exactly one {kind}, found {len(found)}")
        return None, {}
    return found[0]

def pod_checks(where, pod):
    sc = pod.get("securityContext") or {}
    if sc.get("runAsNonRoot") is not True:
        err(f"{where}: pod securityContext.runAsNonRoot is not true")
    if (sc.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
        err(f"{where}: pod seccompProfile is not RuntimeDefault")
    for c in pod.get("containers") or []:
        csc = c.get("securityContext") or {}
        cname = f"{where} container {c.get('name')}"
        if csc.get("allowPrivilegeEscalation") is not False:
            err(f"{cname}: allowPrivilegeEscalation is not false")
        if csc.get("readOnlyRootFilesystem") is not True:
            err(f"{cname}: readOnlyRootFilesystem is not true")
        if "ALL" not in ((csc.get("capabilities") or {}).get("drop") or []):
            err(f"{cname}: capabilities.drop lacks ALL")
        if not (c.get("resources") or {}).get("limits", {}).get("memory"):
            err(f"{cname}: no memory limit")
        if not any((e.get("secretRef") or {}).get("name") == "outboxd-secrets"
                   for e in c.get("envFrom") or []):
            err(f"{cname}: does not load the outboxd-secrets Secret")
        args = c.get("args") or []
        if "--config" in args:
            cfg = args[args.index("--config") + 1]
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts") or []}
            if os.path.dirname(cfg) not in mounts:
                err(f"{cname}: --config {cfg} is not under a volumeMount")
        else:
            err(f"{cname}: no --config argument")

# Deployment
dep_file, dep = one("Deployment")
grace = None
pod_labels = {}
if dep:
    spec = dep["spec"]
    tmpl = spec["template"]
    pod = tmpl["spec"]
    pod_labels = tmpl["metadata"].get("labels") or {}
    sel = spec["selector"]["matchLabels"]
    if any(pod_labels.get(k) != v for k, v in sel.items()):
        err("Deployment: selector does not match the pod template labels")
    if spec.get("replicas", 1) < 2:
        err("Deployment: fewer than 2 replicas")
    grace = pod.get("terminationGracePeriodSeconds")
    if not isinstance(grace, int) or grace <= 20:
        err(f"Deployment: terminationGracePeriodSeconds {grace!r} is not > 20 (shutdown_grace)")
    pod_checks("Deployment", pod)
    c = pod["containers"][0]
    probes = {
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
    for probe, path in probes.items():
        got = ((c.get(probe) or {}).get("httpGet") or {})
        if got.get("path") != path:
            err(f"Deployment: {probe} path is {got.get('path')!r}, expected {path}")
        port = got.get("port")
        if ports.get(port, port) != 8080:
            err(f"Deployment: {probe} port {port!r} is not 8080")
    args = c.get("args") or []
    if args[:1] != ["run"] or "--skip-migrations" not in args:
        err(f"Deployment: container args {args} are not `run --skip-migrations ...`")
    ann = tmpl["metadata"].get("annotations") or {}
    if ann.get("prometheus.io/scrape") != "true" or ann.get("prometheus.io/path") != "/metrics":
        err("Deployment: prometheus scrape annotations missing")
    if not pod.get("topologySpreadConstraints") and not (pod.get("affinity") or {}).get("podAntiAffinity"):
        err("Deployment: no topologySpreadConstraints or podAntiAffinity")
    print(f"ok: Deployment (replicas {spec.get('replicas')}, grace {grace}s, probes /healthz + /readyz, non-root)")

# PodDisruptionBudget
pdb_file, pdb = one("PodDisruptionBudget")
if pdb:
    s = pdb["spec"]
    if "minAvailable" not in s and "maxUnavailable" not in s:
        err("PodDisruptionBudget: neither minAvailable nor maxUnavailable")
    if any(pod_labels.get(k) != v for k, v in s["selector"]["matchLabels"].items()):
        err("PodDisruptionBudget: selector does not match the Deployment's pods")
    print("ok: PodDisruptionBudget selects the Deployment's pods")

# Service
svc_file, svc = one("Service")
if svc and dep:
    if any(pod_labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        err("Service: selector does not match the Deployment's pods")
    cports = {p.get("name"): p.get("containerPort")
              for p in dep["spec"]["template"]["spec"]["containers"][0].get("ports") or []}
    for p in svc["spec"]["ports"]:
        tp = p.get("targetPort")
        if cports.get(tp, tp) != 8080:
            err(f"Service: targetPort {tp!r} is not the container's 8080")
    print("ok: Service targets the admin port 8080")

# Job
job_file, job = one("Job")
if job:
    pod = job["spec"]["template"]["spec"]
    args = pod["containers"][0].get("args") or []
    command = pod["containers"][0].get("command") or []
    if "migrate" not in command + args:
        err(f"Job: does not run `outboxd migrate` (args {args})")
    if "backoffLimit" not in job["spec"] or "ttlSecondsAfterFinished" not in job["spec"]:
        err("Job: backoffLimit or ttlSecondsAfterFinished missing")
    if pod.get("restartPolicy") not in ("Never", "OnFailure"):
        err("Job: restartPolicy must be Never or OnFailure")
    pod_checks("Job", pod)
    if dep and pod["containers"][0].get("image") != dep["spec"]["template"]["spec"]["containers"][0].get("image"):
        err("Job and Deployment use different images")
    print(f"ok: Job runs {args}")

# Secret example: placeholders only
sec_file, sec = one("Secret")
if sec:
    values = {**(sec.get("stringData") or {}), **(sec.get("data") or {})}
    for k, v in values.items():
        if "CHANGE-ME" not in str(v):
            err(f"{sec_file}: {k} is not marked as a placeholder (CHANGE-ME)")
    print(f"ok: {sec_file} holds placeholders only ({', '.join(values)})")

# ConfigMap: the embedded outboxd.toml
cm_file, cm = one("ConfigMap")
if cm:
    text = (cm.get("data") or {}).get("outboxd.toml")
    if not text:
        err("ConfigMap: no outboxd.toml key")
    else:
        try:
            cfg = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            err(f"ConfigMap outboxd.toml: invalid TOML: {e}")
            cfg = None
        if cfg:
            db = cfg.get("database", {})
            if not str(db.get("url", "")).startswith(("postgres://", "postgresql://")):
                err("outboxd.toml: database.url is not PostgreSQL (replicas need PostgreSQL)")
            if re.search(r"://[^/@]*:[^/@]*@", str(db.get("url", ""))):
                err("outboxd.toml: database.url contains a password")
            if cfg.get("admin", {}).get("listen") != "0.0.0.0:8080":
                err("outboxd.toml: admin.listen is not 0.0.0.0:8080")
            d = cfg.get("dispatcher", {})
            lease = seconds(d.get("lease", "30s"))
            sgrace = seconds(d.get("shutdown_grace", "20s"))
            if grace is not None and sgrace >= grace:
                err(f"shutdown_grace {sgrace}s is not below terminationGracePeriodSeconds {grace}s")
            if sgrace >= lease:
                err(f"shutdown_grace {sgrace}s is not below lease {lease}s")
            # A batch is delivered `concurrency` at a time and recorded when all are done,
            # so the lease must cover every wave of the slowest provider.
            waves = -(-int(d.get("batch_size", 100)) // max(1, int(d.get("concurrency", 32))))
            for name, p in cfg.get("providers", {}).items():
                need = seconds(p.get("connect_timeout", "5s")) + seconds(p.get("request_timeout", "30s"))
                if lease <= waves * need:
                    err(f"lease {lease}s is not above {waves} wave(s) x providers.{name} "
                        f"connect+request timeout {need}s (batch_size/concurrency)")
            env_names = set()
            def walk(node):
                if isinstance(node, dict):
                    for k, v in node.items():
                        if k.endswith("_env") and isinstance(v, str):
                            env_names.add(v)
                        walk(v)
                elif isinstance(node, list):
                    for v in node:
                        walk(v)
            walk(cfg)
            if sec:
                missing = env_names - set(values)
                if missing:
                    err(f"secret.example.yaml lacks variables named by *_env keys: {sorted(missing)}")
            if "issue_refund" not in cfg.get("actions", {}):
                err("outboxd.toml: no issue_refund action")
            print(f"ok: outboxd.toml parses; lease {lease:g}s > {waves} wave(s) x connect+request timeouts; "
                  f"shutdown_grace {sgrace:g}s < grace {grace}s; *_env vars {sorted(env_names)} in the Secret")

# Kustomization
kfile = os.path.join(root, "kustomization.yaml")
if not os.path.exists(kfile):
    err("kustomization.yaml missing")
else:
    k = yaml.safe_load(open(kfile))
    listed = k.get("resources") or []
    for r in listed:
        if not os.path.exists(os.path.join(root, r)):
            err(f"kustomization.yaml lists missing {r}")
    for f in by_file:
        if f not in listed and f not in ("kustomization.yaml", "secret.example.yaml"):
            err(f"kustomization.yaml does not list {f}")
    print(f"ok: kustomization.yaml lists {', '.join(listed)}")

if errors:
    for e in errors:
        print(f"ERROR: {e}", file=sys.stderr)
    sys.exit(1)
PY
    echo "ok: manifests"
fi

# --------------------------------------------------------------------------------------
section "kustomize build"
if command -v kubectl >/dev/null 2>&1; then
    echo "\$ kubectl kustomize $k8s"
    kubectl kustomize "$k8s" > "$tmp/rendered.yaml" || fail "kubectl kustomize failed"
    echo "ok: rendered $(grep -c '^kind:' "$tmp/rendered.yaml") objects"
else
    skip "kubectl not installed; kustomization not rendered"
fi

# --------------------------------------------------------------------------------------
section "Dockerfile: $here/Dockerfile"
skip "hadolint not available; only the runtime contract is checked"
df="$here/Dockerfile"
for pattern in \
    '^FROM rust:\$\{RUST_VERSION\}-bookworm AS builder$' \
    '^FROM debian:bookworm-slim' \
    'cargo build --release --locked' \
    'ca-certificates' \
    '^USER 10001:10001$' \
    '^EXPOSE 8080$' \
    '^ENTRYPOINT \["outboxd"\]$' \
    '^CMD \["run", "--config", "/etc/outboxd/outboxd.toml"\]$'; do
    grep -Eq "$pattern" "$df" || fail "Dockerfile: no line matching $pattern"
done
[[ -f "$here/Dockerfile.dockerignore" ]] || fail "deploy/Dockerfile.dockerignore missing"
grep -qx 'target' "$here/Dockerfile.dockerignore" || fail "Dockerfile.dockerignore does not exclude target"
echo "ok: multi-stage, non-root 10001, EXPOSE 8080, ENTRYPOINT/CMD, target/ excluded from the context"

# --------------------------------------------------------------------------------------
section "outboxd config check"
if [[ -z "$binary" ]]; then
    skip "no outboxd binary given (deploy/lint.sh path/to/outboxd); ConfigMap not validated by outboxd"
elif (( have_yaml == 0 )); then
    skip "PyYAML unavailable; cannot extract the ConfigMap"
else
    python3 - "$k8s" "$tmp" <<'PY'
import sys, yaml, shlex
k8s, tmp = sys.argv[1], sys.argv[2]
cm = yaml.safe_load(open(f"{k8s}/configmap.yaml"))
open(f"{tmp}/outboxd.toml", "w").write(cm["data"]["outboxd.toml"])
sec = yaml.safe_load(open(f"{k8s}/secret.example.yaml"))
with open(f"{tmp}/env", "w") as f:
    for k, v in sec["stringData"].items():
        f.write(f"export {k}={shlex.quote(v)}\n")
PY
    echo "\$ $binary config check --config <configmap outboxd.toml>   (env: secret.example.yaml placeholders)"
    (
        # shellcheck disable=SC1091
        source "$tmp/env"
        "$binary" config check --config "$tmp/outboxd.toml" > "$tmp/check.out" 2>&1
    ) || { cat "$tmp/check.out" >&2; fail "outboxd config check rejected the ConfigMap's outboxd.toml"; }
    tail -n 1 "$tmp/check.out"
    echo "ok: outboxd config check accepted the ConfigMap's outboxd.toml"
fi

# --------------------------------------------------------------------------------------
section "summary"
if (( ${#skipped[@]} )); then
    printf 'skipped: %s\n' "${skipped[@]}"
fi
echo "deploy lint passed"
