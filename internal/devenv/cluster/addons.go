package cluster

import (
	"context"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// coreDNS applies CoreDNS (its ServiceAccount, RBAC, Corefile, Deployment
// and the kube-dns Service at DNSServiceIP) and waits until it is
// available.
func (u *upper) coreDNS(ctx context.Context) error {
	if err := u.deploy(ctx, "CoreDNS", coreDNSManifest, map[string]string{"Image": u.c.Images["coredns"], "DNS": DNSServiceIP}, "kube-system", "coredns"); err != nil {
		return err
	}
	u.step("CoreDNS available (kube-system/coredns, Service kube-dns %s)", DNSServiceIP)
	return nil
}

// deploy applies manifest (a template filled with data) and waits until
// its Deployment ns/name has an available replica.
func (u *upper) deploy(ctx context.Context, what, manifest string, data map[string]string, ns, name string) error {
	var b strings.Builder
	if err := parse(manifest).Execute(&b, data); err != nil {
		return err
	}
	if err := u.apply(ctx, b.String()); err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(u.c.Config)
	if err != nil {
		return err
	}
	return u.wait(ctx, what, nil, func(ctx context.Context) error {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.AvailableReplicas < 1 {
			return fmt.Errorf("deployment %s/%s: %d of %d replicas available", ns, name, d.Status.AvailableReplicas, *d.Spec.Replicas)
		}
		return nil
	})
}

// apply runs the pinned kubectl apply with the admin kubeconfig.
func (u *upper) apply(ctx context.Context, manifest string) error {
	_, err := u.c.Apply(ctx, manifest)
	return err
}

// coreDNSManifest: the upstream CoreDNS deployment, cut down. The Corefile
// serves cluster.local and the reverse zones only and has no forward
// plugin: every other name is refused. CoreDNS listens on 1053 (it runs as
// 65532, with no capability to bind 53); the Service maps 53 to it.
const coreDNSManifest = `apiVersion: v1
kind: ServiceAccount
metadata:
  name: coredns
  namespace: kube-system
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:coredns
rules:
- apiGroups: [""]
  resources: [endpoints, services, pods, namespaces]
  verbs: [list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: system:coredns
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:coredns
subjects:
- kind: ServiceAccount
  name: coredns
  namespace: kube-system
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
data:
  Corefile: |
    cluster.local:1053 in-addr.arpa:1053 ip6.arpa:1053 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
        }
        cache 30
        loadbalance
        reload
    }
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: coredns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  replicas: 1
  selector:
    matchLabels: {k8s-app: kube-dns}
  template:
    metadata:
      labels: {k8s-app: kube-dns}
    spec:
      serviceAccountName: coredns
      priorityClassName: system-cluster-critical
      dnsPolicy: Default
      containers:
      - name: coredns
        image: {{.Image}}
        imagePullPolicy: Never
        args: ["-conf", "/etc/coredns/Corefile"]
        ports:
        - {name: dns, containerPort: 1053, protocol: UDP}
        - {name: dns-tcp, containerPort: 1053, protocol: TCP}
        securityContext:
          runAsNonRoot: true
          allowPrivilegeEscalation: false
          readOnlyRootFilesystem: true
          capabilities: {drop: [ALL]}
        volumeMounts:
        - {name: config, mountPath: /etc/coredns, readOnly: true}
        livenessProbe:
          httpGet: {path: /health, port: 8080}
        readinessProbe:
          httpGet: {path: /ready, port: 8181}
        resources:
          requests: {cpu: 50m, memory: 32Mi}
          limits: {memory: 128Mi}
      volumes:
      - name: config
        configMap: {name: coredns}
---
apiVersion: v1
kind: Service
metadata:
  name: kube-dns
  namespace: kube-system
  labels: {k8s-app: kube-dns}
spec:
  clusterIP: {{.DNS}}
  selector: {k8s-app: kube-dns}
  ports:
  - {name: dns, port: 53, targetPort: 1053, protocol: UDP}
  - {name: dns-tcp, port: 53, targetPort: 1053, protocol: TCP}
`
