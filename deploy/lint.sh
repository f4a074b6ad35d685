#!/usr/bin/env bash
# Lints the deployment files with what a Debian machine usually has, no network needed:
#
#   deploy/lint.sh [OUTBOXD_BINARY]
#
#  1. systemd/outboxd.service: `systemd-analyze verify` on a temporary copy whose
#     ExecStart/ExecStartPre point at OUTBOXD_BINARY (or /bin/true, since /usr/bin/outboxd
#     is usually absent on a dev machine), plus the offline exposure score of
#     `systemd-analyze security`. Skipped, with a message, without systemd-analyze.
#  2. kubernetes/: rendered with `kubectl kustomize` when kubectl is installed (offline),
#     otherwise assembled from the kustomization's files, and checked by lint_k8s.py: no
#     Job, the migrate init container with database credentials only, NetworkPolicy,
#     memory request = limit, probes, security context. With kubectl it is rendered again
#     with a new image to show that the second `kubectl apply -k` of a release changes
#     only the Deployment's pod template.
#  3. prometheus/ and grafana/: every outboxd_* name is registered in src/metrics and
#     every runbook_url has a section in docs/runbooks.md (lint_alerts.py); with
#     promtool, `promtool check rules` and `promtool test rules`.
#  4. Dockerfile: the workspace's crates/ copied in, pinned toolchain, distroless runtime
#     without RUN, OCI labels, non-root uid 10001, EXPOSE 8080, ENTRYPOINT/CMD. hadolint is
#     not used (not packaged for Debian).
#  5. With OUTBOXD_BINARY: `outboxd config check` on the ConfigMap's outboxd.toml (with the
#     placeholders of secret.example.yaml as environment) and on its migrate.toml (with
#     only the database password set).
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
elif command -v kubectl >/dev/null 2>&1; then
    echo "\$ kubectl kustomize $k8s"
    kubectl kustomize "$k8s" > "$tmp/rendered.yaml" || fail "kubectl kustomize failed"
    echo "ok: rendered $(grep -c '^kind:' "$tmp/rendered.yaml") objects"
    # The next release: the same kustomization with another image, as an overlay (of a
    # copy: kustomize takes no absolute paths).
    cp -r "$k8s" "$tmp/base"
    mkdir -p "$tmp/next"
    printf '%s\n' \
        'apiVersion: kustomize.config.k8s.io/v1beta1' \
        'kind: Kustomization' \
        'resources:' \
        '  - ../base' \
        'images:' \
        '  - name: registry.example.com/outboxd' \
        '    newTag: next-release' > "$tmp/next/kustomization.yaml"
    echo "\$ kubectl kustomize <overlay of $k8s with images: newTag next-release>"
    kubectl kustomize "$tmp/next" > "$tmp/rendered-next.yaml" || fail "kubectl kustomize (new image) failed"
    LINT_TMP="$tmp" python3 "$here/lint_k8s.py" "$k8s" "$tmp/rendered.yaml" "$tmp/rendered-next.yaml" \
        || fail "Kubernetes manifests"
    echo "ok: manifests"
else
    skip "kubectl not installed; resources assembled without kustomize, second apply not rendered"
    LINT_TMP="$tmp" python3 "$here/lint_k8s.py" "$k8s" - || fail "Kubernetes manifests"
    echo "ok: manifests"
fi

# --------------------------------------------------------------------------------------
section "Prometheus rules and Grafana dashboard: $here/prometheus, $here/grafana"
rules="$here/prometheus/outboxd-rules.yaml"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["panels"], "no panels"' \
    "$here/grafana/outboxd-dashboard.json" || fail "grafana/outboxd-dashboard.json is not a dashboard"
# Every outboxd_* name used must be a metric src/metrics registers (no invented metrics;
# comments are left out, so a TODO may name one not built yet), and every runbook_url must
# have its section in docs/runbooks.md.
python3 "$here/lint_alerts.py" "$here/../src/metrics" "$here/../docs/runbooks.md" "$rules" \
    "$here/prometheus/outboxd-rules.test.yaml" "$here/grafana/outboxd-dashboard.json" \
    || fail "unknown metric names"
if command -v promtool >/dev/null 2>&1; then
    echo "\$ promtool check rules $rules"
    promtool check rules "$rules" || fail "promtool check rules"
    echo "\$ promtool test rules $here/prometheus/outboxd-rules.test.yaml"
    promtool test rules "$here/prometheus/outboxd-rules.test.yaml" || fail "promtool test rules"
else
    skip "promtool not installed (apt-get install prometheus); rules not checked or tested"
fi

# --------------------------------------------------------------------------------------
section "Dockerfile: $here/Dockerfile"
skip "hadolint not available; only the image contract is checked"
df="$here/Dockerfile"
for pattern in \
    '^ARG RUST_VERSION=[0-9]+\.[0-9]+\.[0-9]+$' \
    '^FROM rust:\$\{RUST_VERSION\}-bookworm AS builder$' \
    '^ARG RUNTIME_IMAGE=gcr\.io/distroless/cc-debian12' \
    '^FROM \$\{RUNTIME_IMAGE\} AS runtime$' \
    'cargo build --release --locked' \
    '^COPY crates \./crates$' \
    'org\.opencontainers\.image\.title' \
    'org\.opencontainers\.image\.licenses="Apache-2\.0"' \
    'org\.opencontainers\.image\.version' \
    'org\.opencontainers\.image\.revision' \
    '^USER 10001:10001$' \
    '^EXPOSE 8080$' \
    '^ENTRYPOINT \["outboxd"\]$' \
    '^CMD \["run", "--config", "/etc/outboxd/outboxd.toml"\]$'; do
    grep -Eq "$pattern" "$df" || fail "Dockerfile: no line matching $pattern"
done
# The runtime stage has no shell or package manager, so no RUN after its FROM.
awk '/^FROM .* AS runtime$/ {rt=1} rt && /^RUN / {found=1} END {exit found}' "$df" \
    || fail "Dockerfile: a RUN in the runtime stage (it has no shell or package manager)"
[[ -f "$here/Dockerfile.dockerignore" ]] || fail "deploy/Dockerfile.dockerignore missing"
grep -qx 'target' "$here/Dockerfile.dockerignore" || fail "Dockerfile.dockerignore does not exclude target"
echo "ok: crates/ copied, pinned toolchain, distroless runtime without RUN, OCI labels, non-root 10001, EXPOSE 8080, ENTRYPOINT/CMD"

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
sec = yaml.safe_load(open(f"{k8s}/secret.example.yaml"))
with open(f"{tmp}/env", "w") as f:
    for k, v in sec["stringData"].items():
        f.write(f"export {k}={shlex.quote(v)}\n")
PY
    echo "\$ $binary config check --config <ConfigMap outboxd.toml>   (env: secret.example.yaml placeholders)"
    (
        # shellcheck disable=SC1091
        source "$tmp/env"
        "$binary" config check --config "$tmp/outboxd.toml" > "$tmp/check.out" 2>&1
    ) || { cat "$tmp/check.out" >&2; fail "outboxd config check rejected the ConfigMap's outboxd.toml"; }
    tail -n 1 "$tmp/check.out"
    echo "ok: outboxd config check accepted the ConfigMap's outboxd.toml"
    # The migrate init container's environment: the database password and nothing else.
    echo "\$ env -i OUTBOXD_DB_PASSWORD=placeholder $binary config check --config <ConfigMap migrate.toml>"
    env -i PATH="$PATH" OUTBOXD_DB_PASSWORD=placeholder \
        "$binary" config check --config "$tmp/migrate.toml" > "$tmp/check-migrate.out" 2>&1 \
        || { cat "$tmp/check-migrate.out" >&2; fail "migrate.toml needs more than the database password"; }
    tail -n 1 "$tmp/check-migrate.out"
    echo "ok: migrate.toml loads with only OUTBOXD_DB_PASSWORD set"
fi

# --------------------------------------------------------------------------------------
section "summary"
if (( ${#skipped[@]} )); then
    printf 'skipped: %s\n' "${skipped[@]}"
fi
echo "deploy lint passed"
