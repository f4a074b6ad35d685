#!/usr/bin/env python3
"""Fails when a rules, test or dashboard file uses an outboxd_* metric that src/metrics
does not register (so alerts and panels cannot silently watch a name nobody exports), or
when a runbook_url points at no section of docs/runbooks.md.

    lint_alerts.py SRC_METRICS_DIR RUNBOOKS_MD FILE...

Names are read from the `register("name", "help", [Unit::Seconds,] ...)` calls (prefix
`outboxd_`, `_seconds` for a seconds unit, and the suffixes Prometheus adds to counters
and histograms). YAML comments are ignored, so a TODO may name a metric not built yet.
"""

import glob
import re
import sys

src = "".join(open(f).read() for f in glob.glob(f"{sys.argv[1]}/*.rs"))
known = set()
pattern = r'register(?:_with_unit)?\(\s*"([a-z_]+)",\s*"[^"]*",\s*(Unit::Seconds)?'
for name, unit in re.findall(pattern, src):
    base = f"outboxd_{name}" + ("_seconds" if unit else "")
    known |= {base + s for s in ("", "_total", "_bucket", "_sum", "_count", "_created")}
if not known:
    sys.exit(f"ERROR: no metric registrations found under {sys.argv[1]}")

runbooks = open(sys.argv[2]).read()
anchors = set()
for heading in re.findall(r"^#+ (.+)$", runbooks, re.M):
    slug = re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")
    anchors.add(slug)

used = set()
bad_links = []
for path in sys.argv[3:]:
    for anchor in re.findall(r"runbooks\.md#([A-Za-z0-9_-]+)", open(path).read()):
        if anchor not in anchors:
            bad_links.append(f"{path}: runbooks.md#{anchor}")
    text = open(path).read()
    if not path.endswith(".json"):
        text = re.sub(r"(^|\s)#.*", "", text)
    used |= set(re.findall(r"\boutboxd_[a-z_]+\b", text))
unknown = sorted(used - known)
if unknown:
    sys.exit(f"ERROR: not exported by src/metrics: {unknown}")
if bad_links:
    sys.exit(f"ERROR: runbook_url without a section in {sys.argv[2]}: {bad_links}")
print(f"ok: {len(used)} outboxd_* names used, all registered in src/metrics; "
      f"every runbook_url has a section in docs/runbooks.md")
