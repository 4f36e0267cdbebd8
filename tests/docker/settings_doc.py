#!/usr/bin/env python3
"""The configuration reference of docs/operations.md, generated from `attnd --help`.

  python3 tests/docker/settings_doc.py ATTND_BIN            print the table
  python3 tests/docker/settings_doc.py ATTND_BIN --write    rewrite it in docs/operations.md
  python3 tests/docker/settings_doc.py ATTND_BIN --check    exit 1 when the doc is stale

The table sits between the markers <!-- settings:begin --> and <!-- settings:end -->.
"""
import os
import re
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOC = os.path.join(REPO, "docs", "operations.md")
BEGIN, END = "<!-- settings:begin -->", "<!-- settings:end -->"

FLAG_RE = re.compile(r"^  (--[a-z0-9-]+)(?: (\S+))?\s{2,}(.*)$")
ENV_RE = re.compile(r'^\s+env (ATTND_[A-Z0-9_]+), key "([a-z0-9_]+)", default (".*?"|\S+)(?: \((.*)\))?$')


def parse(help_text):
    rows, pending = [], None
    for line in help_text.splitlines():
        m = FLAG_RE.match(line)
        if m and not line.startswith("  --help"):
            pending = m.groups()
            continue
        m = ENV_RE.match(line)
        if m and pending:
            flag, spec, what = pending
            env, key, default, bounds = m.groups()
            rows.append({"key": key, "env": env, "flag": flag + (" " + spec if spec else ""),
                         "default": default, "bounds": bounds or ("boolean" if spec == "[BOOL]" else ""),
                         "what": what})
            pending = None
    return rows


def table(rows):
    out = ["| key | environment | flag | default | units, bounds | what |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        out.append("| `%s` | `%s` | `%s` | `%s` | %s | %s |" % (r["key"], r["env"], r["flag"], r["default"],
                                                                r["bounds"].replace("|", "\\|"),
                                                                r["what"].replace("|", "\\|")))
    return "\n".join(out)


def help_text(binary):
    return subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30, check=True).stdout


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    t = table(parse(help_text(argv[1])))
    if len(argv) == 2:
        print(t)
        return 0
    doc = open(DOC).read()
    i, j = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    new = doc[:i] + "\n" + t + "\n" + doc[j:]
    if argv[2] == "--check":
        if new != doc:
            print("docs/operations.md: the settings table is stale; run: python3 tests/docker/settings_doc.py "
                  "build/attnd --write")
            return 1
        return 0
    with open(DOC, "w") as f:
        f.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
