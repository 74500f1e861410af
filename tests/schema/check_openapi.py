#!/usr/bin/env python3
"""check_openapi.py - schema/openapi.yaml stays true to the code.

Fails (exit 1) when the file is not valid YAML, when a route of
server/routes.def has no path and method in it, or when it documents a
path and method atolld does not route. Run by ctest (schema_openapi)."""
import re
import sys

import yaml

root = sys.argv[1]
spec = yaml.safe_load(open(f"{root}/schema/openapi.yaml"))
routes = set()
for line in open(f"{root}/server/routes.def"):
    m = re.match(r'ROUTE\("(\w+)", "([^"]+)"', line)
    if m:
        path = re.sub(r":(\w+)", r"{\1}", m.group(2))
        routes.add((m.group(1).lower(), path))
documented = set()
for path, item in spec["paths"].items():
    for method in item:
        if method in ("get", "post", "put", "delete", "patch"):
            documented.add((method, re.sub(r"\{\w+\}", "{id}", path)))
norm = {(m, re.sub(r"\{\w+\}", "{id}", p)) for m, p in routes}
# The dashboard: router.c serves web/ for a GET no table row matches.
norm |= {("get", "/"), ("get", "/{id}")}
missing = sorted(norm - documented)
extra = sorted(documented - norm)
for m, p in missing:
    print(f"routed but not in openapi.yaml: {m.upper()} {p}")
for m, p in extra:
    print(f"in openapi.yaml but not routed: {m.upper()} {p}")
if missing or extra:
    sys.exit(1)
print(f"openapi.yaml: {len(norm)} routes, all documented")
