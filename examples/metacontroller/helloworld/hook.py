"""HelloWorld's sync, finalize and customize hooks (Metacontroller's
example, ported; customize added: spec.whoFrom names a ConfigMap whose
data.who replaces spec.who).

Standard library only. Listens on $PORT. If $HOOK_TOKEN is set, a call
must carry it as a bearer token.
"""
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = os.environ.get("HOOK_TOKEN", "")


def customize(parent):
    source = parent.get("spec", {}).get("whoFrom")
    if not source:
        return {"relatedResources": []}
    return {"relatedResources": [
        {"apiVersion": "v1", "resource": "configmaps", "names": [source]}]}


def sync(parent, children, related):
    who = parent.get("spec", {}).get("who", "World")
    source = parent.get("spec", {}).get("whoFrom")
    if source:
        cm = related.get("ConfigMap.v1", {}).get(source)
        if cm and cm.get("data", {}).get("who"):
            who = cm["data"]["who"]
    name = parent["metadata"]["name"]
    greeting = "Hello, %s!" % who
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"greeting": greeting}},
        "spec": {
            "restartPolicy": "OnFailure",
            "containers": [{"name": "hello", "image": "busybox",
                            "command": ["echo", greeting]}],
        },
    }
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"greeting": greeting},
    }
    answer = {"status": {"greeting": greeting,
                         "pods": len(children.get("Pod.v1", {}))},
              "children": [pod, cm]}
    resync = parent.get("spec", {}).get("resyncAfterSeconds")
    if resync:
        answer["resyncAfterSeconds"] = resync
    return answer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        # opzero dev (and a readiness probe) asks /healthz.
        self.send_response(200 if self.path == "/healthz" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self):
        if TOKEN and self.headers.get("Authorization") != "Bearer " + TOKEN:
            self.send_error(401, "bad token")
            return
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        parent = req["parent"]
        if self.path == "/sync":
            if parent.get("spec", {}).get("who") == "garbage":
                body = b"this is not JSON"
            else:
                body = json.dumps(sync(parent, req["children"], req["related"])).encode()
        elif self.path == "/customize":
            body = json.dumps(customize(parent)).encode()
        elif self.path == "/finalize":
            # Done at once; the children stay until the garbage collector
            # removes them with their parent.
            answer = sync(parent, req["children"], req["related"])
            answer["finalized"] = True
            body = json.dumps(answer).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        if self.command == "POST":
            print("hook: POST %s %s" % (self.path, fmt % args), flush=True)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(os.environ.get("PORT", "8080"))), Handler).serve_forever()
