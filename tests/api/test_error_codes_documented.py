"""Every error code the server can answer is in docs/api.md's Errors table.

The codes are read from the sources: each api_fail(e, status, CODE, …) call of the front, the
worker and the kernels' glue, and the pool's job_failed(job, CODE, …) and
queue_error_body(CODE, …), which fail a run that was accepted (a code chosen by a conditional
counts each of its literals). A new refusal or failure without its row fails here, so a
client's author can trust the table."""
import os
import re

from attnd_api_helpers import REPO

SOURCE_DIRS = ("server", "common", "kernels")
# the functions that answer an error code, and which of their arguments is the code
CODE_ARGUMENT = {"api_fail": 2, "job_failed": 1, "queue_error_body": 0}

# Codes that never reach a client, each with the reason.
NOT_ANSWERED = {
    "cancelled": "also 499 for a download whose client went away: nobody reads that answer (409 is in the table)",
    "refused": "a study's fallback when a refusal carries no code; every refusal carries one",
}


def call_arguments(text, name):
    """The argument lists of every call of `name` in C source `text` (strings and nesting kept)."""
    for m in re.finditer(r"\b%s\(" % name, text):
        i, depth, args, cur, in_string, escaped = m.end(), 1, [], "", False, False
        while i < len(text) and depth:
            c = text[i]
            if in_string:
                escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
                cur += c
            elif c == '"':
                in_string, cur = True, cur + c
            elif c in "([{":
                depth, cur = depth + 1, cur + c
            elif c in ")]}":
                depth -= 1
                cur += c if depth else ""
            elif c == "," and depth == 1:
                args, cur = args + [cur.strip()], ""
            else:
                cur += c
            i += 1
        yield args + [cur.strip()]


def codes_in_sources():
    codes = {}
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if not f.endswith((".c", ".cu", ".h", ".cuh")):
                    continue
                path = os.path.join(root, f)
                with open(path, errors="replace") as src:
                    text = src.read()
                for name, at in CODE_ARGUMENT.items():
                    for args in call_arguments(text, name):
                        if len(args) <= at:
                            continue
                        for code in re.findall(r'"([a-z_]+)"', args[at]):  # declarations have none
                            codes.setdefault(code, set()).add(os.path.relpath(path, REPO))
    return codes


def documented_codes():
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        text = f.read()
    table = text[text.index("\n## Errors\n"):]
    table = table[:table.index("\n## ", 1)]
    rows = [ln for ln in table.splitlines() if re.match(r"\| [1-5][0-9][0-9] \| ", ln)]
    return {code for ln in rows for code in re.findall(r"`([a-z_]+)`", ln.split("|")[2])}


def test_the_scan_finds_the_known_codes():
    codes = codes_in_sources()
    assert {"bad_value", "out_of_range", "unsupported", "cuda_error", "gone"} <= set(codes), sorted(codes)


def test_every_code_answered_is_in_the_errors_table():
    documented = documented_codes()
    missing = {code: sorted(where) for code, where in codes_in_sources().items()
               if code not in documented and code not in NOT_ANSWERED}
    assert not missing, "codes answered but not in docs/api.md's Errors table: %s" % missing


def test_the_table_names_no_code_the_server_never_answers():
    # Codes answered outside api_fail (built as JSON elsewhere), looked for as literals.
    sources = ""
    for top in SOURCE_DIRS:
        for root, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                if f.endswith((".c", ".cu", ".h", ".cuh")):
                    with open(os.path.join(root, f), errors="replace") as src:
                        sources += src.read()
    stale = sorted(code for code in documented_codes() if '"%s"' % code not in sources)
    assert not stale, "docs/api.md's Errors table names codes no source answers: %s" % stale
