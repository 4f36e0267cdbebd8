#!/usr/bin/env python3
"""scripts/study-screenshot.py — the dashboard's study view of a saved study record, as Chromium
paints it: for docs/img, from a study run on a GPU (tests/gpu/test_studies.py saves the H200's
in $OUT/studies-gpu.json) on a machine without one.

attnd serves its own dashboard here; the browser's requests for that study are answered with
the saved record (DevTools Fetch), everything else by attnd. So the picture is the dashboard's
code over the GPU's numbers.

    scripts/study-screenshot.py STUDY.json OUT.png [--attnd build/test/attnd]

STUDY.json is a study record (GET /v1/studies/ID) or a file holding one under "study".
"""
import argparse
import base64
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "api"))
import conftest  # noqa: E402  the tests' attnd process (AttndServer); registers attnd_api_helpers
from test_dashboard import Browser  # noqa: E402  the tests' headless Chromium over DevTools


class StudyBrowser(Browser):
    """A Browser whose page gets `record` for every request of /v1/studies/ID."""

    def __init__(self, record):
        self.record = json.dumps(record).encode()
        super().__init__()
        self._call(self.ws, "Fetch.enable", {"patterns": [{"urlPattern": "*/v1/studies/%d*" % record["id"]}]})

    def on_event(self, ws, msg):
        if msg["method"] != "Fetch.requestPaused":
            return super().on_event(ws, msg)
        self.next_id += 1  # answered without waiting: the reply is skipped like any other
        ws.send(json.dumps({"id": self.next_id, "method": "Fetch.fulfillRequest", "params": {
            "requestId": msg["params"]["requestId"], "responseCode": 200,
            "responseHeaders": [{"name": "Content-Type", "value": "application/json"}],
            "body": base64.b64encode(self.record).decode()}}))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study", help="a saved study record (JSON)")
    ap.add_argument("out", help="the PNG to write")
    ap.add_argument("--attnd", default="build/test/attnd", help="the attnd binary that serves the dashboard")
    args = ap.parse_args()
    if not args.out.endswith(".png"):
        sys.exit("OUT must end in .png")
    with open(args.study) as f:
        record = json.load(f)
    record = record.get("study", record)
    os.environ["ATTND_BIN"] = os.path.abspath(args.attnd)  # the binary AttndServer starts
    server = conftest.AttndServer().start()
    browser = None
    try:
        browser = StudyBrowser(record)
        browser.navigate(server.url + "/#study=%d" % record["id"])
        browser.wait_for("!!document.querySelector('#study') && document.querySelector('#study').dataset.status "
                         "=== %s" % json.dumps(record["status"]), "the study view")
        # Browser.screenshot writes NAME.png into ATTND_SCREENSHOT_DIR
        os.environ["ATTND_SCREENSHOT_DIR"] = os.path.dirname(os.path.abspath(args.out))
        png = browser.screenshot("#study", os.path.basename(args.out)[:-len(".png")])
    finally:
        if browser:
            browser.close()
        server.stop()
        server.cleanup()
    print("wrote %s (%dx%d)" % (args.out, png.width, png.height))


if __name__ == "__main__":
    main()
