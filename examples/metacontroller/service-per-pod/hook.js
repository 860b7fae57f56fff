// service-per-pod's sync and finalize hooks (Metacontroller's example,
// ported from jsonnet). Node's standard library only; listens on $PORT.
// If $HOOK_TOKEN is set, a call must carry it as a bearer token.
"use strict";
const http = require("http");

const token = process.env.HOOK_TOKEN || "";

function sync(sts) {
  const ann = sts.metadata.annotations || {};
  const label = ann["service-per-pod-label"];
  const ports = ann["service-per-pod-ports"].split(",").map((p) => {
    const [port, targetPort] = p.split(":");
    return { port: Number(port), targetPort: Number(targetPort || port) };
  });
  const attachments = [];
  for (let i = 0; i < (sts.spec.replicas ?? 1); i++) {
    const pod = `${sts.metadata.name}-${i}`;
    attachments.push({
      apiVersion: "v1",
      kind: "Service",
      metadata: { name: pod, labels: { app: "service-per-pod" } },
      spec: { selector: { [label]: pod }, ports },
    });
  }
  return { attachments };
}

http
  .createServer((req, res) => {
    if (req.method === "GET") {
      // opzero dev (and a readiness probe) asks /healthz.
      res.writeHead(req.url === "/healthz" ? 200 : 404).end();
      return;
    }
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      res.writeHead(401).end("bad token");
      return;
    }
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      console.log(`hook: POST ${req.url} `);
      const { object, finalizing } = JSON.parse(body);
      let answer;
      if (req.url === "/sync" && !finalizing) {
        answer = sync(object);
      } else if (req.url === "/finalize") {
        answer = { attachments: [], finalized: true };
      } else {
        res.writeHead(404).end();
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(JSON.stringify(answer));
    });
  })
  .listen(Number(process.env.PORT || 8080), "127.0.0.1");
