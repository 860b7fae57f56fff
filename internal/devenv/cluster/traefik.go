package cluster

import (
	"context"
	"regexp"
	"strings"

	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/devenv/pinned"
)

// IngressClass is the Knative ingress class Traefik's Knative provider
// serves; config-network names it.
const IngressClass = "traefik.ingress.networking.knative.dev"

// configNetwork is the data line after which the ingress class is set.
var configNetwork = regexp.MustCompile(`(?m)^  name: config-network$`)

// withIngressClass sets config-network's ingress-class to Traefik's.
func withIngressClass(doc string) string {
	if !configNetwork.MatchString(doc) {
		return doc
	}
	return strings.Replace(doc, "\ndata:\n", "\ndata:\n  ingress-class: \""+IngressClass+"\"\n", 1)
}

// traefik builds Traefik's image and runs it as Knative Serving's ingress
// (its experimental Knative provider): public routes on the traefik
// Service, cluster-local ones on traefik-internal, both port 80.
func (u *upper) traefik(ctx context.Context) error {
	p, err := pinned.Resolver{Dir: u.opts.BinDir, Progress: u.opts.Progress}.FindOne(ctx, pinned.Traefik)
	if err != nil {
		return err
	}
	if err := u.importImages(ctx, "traefik.tar", image.Spec{Name: "traefik", Binary: p}); err != nil {
		return err
	}
	if err := u.deploy(ctx, "Traefik", traefikManifest, map[string]string{"Image": u.c.Images["traefik"]}, "traefik", "traefik"); err != nil {
		return err
	}
	u.step("Traefik available (traefik/traefik, ingress class %s)", IngressClass)
	return nil
}

// traefikManifest: Traefik with only its Knative provider, no dashboard,
// and nothing that calls out (version checks and usage reports off).
const traefikManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: traefik
---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: traefik
  namespace: traefik
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: opzero-traefik-knative
rules:
- apiGroups: [networking.internal.knative.dev]
  resources: [ingresses]
  verbs: [get, list, watch]
- apiGroups: [networking.internal.knative.dev]
  resources: [ingresses/status]
  verbs: [get, update, patch]
- apiGroups: [""]
  resources: [services, secrets, endpoints]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: opzero-traefik-knative
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: opzero-traefik-knative
subjects:
- kind: ServiceAccount
  name: traefik
  namespace: traefik
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: traefik
  namespace: traefik
  labels: {app: traefik}
spec:
  replicas: 1
  selector:
    matchLabels: {app: traefik}
  template:
    metadata:
      labels: {app: traefik}
    spec:
      serviceAccountName: traefik
      containers:
      - name: traefik
        image: {{.Image}}
        imagePullPolicy: Never
        args:
        - --global.checkNewVersion=false
        - --global.sendAnonymousUsage=false
        - --log.level=INFO
        - --entryPoints.web.address=:8000
        - --entryPoints.web-internal.address=:8001
        - --entryPoints.traefik.address=:8082
        - --ping=true
        - --experimental.knative=true
        - --providers.knative=true
        - --providers.knative.publicEntrypoints=web
        - --providers.knative.publicService.name=traefik
        - --providers.knative.publicService.namespace=traefik
        - --providers.knative.privateEntrypoints=web-internal
        - --providers.knative.privateService.name=traefik-internal
        - --providers.knative.privateService.namespace=traefik
        ports:
        - {name: web, containerPort: 8000}
        - {name: web-internal, containerPort: 8001}
        - {name: ping, containerPort: 8082}
        readinessProbe:
          httpGet: {path: /ping, port: 8082}
        securityContext:
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        resources:
          requests: {cpu: 50m, memory: 64Mi}
---
apiVersion: v1
kind: Service
metadata:
  name: traefik
  namespace: traefik
spec:
  selector: {app: traefik}
  ports:
  - {name: http, port: 80, targetPort: 8000}
---
apiVersion: v1
kind: Service
metadata:
  name: traefik-internal
  namespace: traefik
spec:
  selector: {app: traefik}
  ports:
  - {name: http, port: 80, targetPort: 8001}
`
