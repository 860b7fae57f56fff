package admission

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
)

// Targets wakes the Deployments of unchanged operators (the hub's
// Deployment sinks; internal/hub implements it).
type Targets interface {
	// ServingPods wakes the Deployment sink of Subscription sub if it is at
	// zero and returns the pods that may serve once it has one (its ready
	// pods, else its running ones, whose readiness probe may lag behind
	// their webhook server), or an error when
	// ctx ends first or the Subscription serves no Deployment. done ends
	// the call: the Deployment is not stopped before.
	ServingPods(ctx context.Context, sub types.NamespacedName, reason string) (pods []corev1.Pod, done func(), err error)
}

// retryDial is how soon a call to a ready pod that refused the connection
// (its webhook server not listening yet) is tried again.
const retryDial = 100 * time.Millisecond

var servicesGVR = schema.GroupVersionResource{Version: "v1", Resource: "services"}
var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// upstreams reads and keeps, for addressTTL, the unchanged operators'
// webhook Services and CA Secrets, and one TLS client per CA and server
// name (its connections reused while the operator is up).
type upstreams struct {
	dyn  dynamic.Interface
	objs *utilcache.Expiring // "<resource>/<namespace>/<name>": the object read

	mu      sync.Mutex
	clients map[string]*http.Client
}

func newUpstreams(dyn dynamic.Interface) *upstreams {
	return &upstreams{dyn: dyn, objs: utilcache.NewExpiring(), clients: map[string]*http.Client{}}
}

// readCached reads object key of gvr as a T, or takes it from what was
// read less than addressTTL ago.
func readCached[T any](ctx context.Context, u *upstreams, gvr schema.GroupVersionResource, key types.NamespacedName) (*T, error) {
	ck := gvr.Resource + "/" + key.String()
	if v, ok := u.objs.Get(ck); ok {
		return v.(*T), nil
	}
	obj, err := u.dyn.Resource(gvr).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var t T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &t); err != nil {
		return nil, err
	}
	u.objs.Set(ck, &t, addressTTL)
	return &t, nil
}

func (u *upstreams) service(ctx context.Context, key types.NamespacedName) (*corev1.Service, error) {
	svc, err := readCached[corev1.Service](ctx, u, servicesGVR, key)
	if err != nil {
		return nil, fmt.Errorf("reading the operator's webhook Service %s: %w", key, err)
	}
	return svc, nil
}

func (u *upstreams) ca(ctx context.Context, up *upstream) ([]byte, error) {
	if up.caPEM != nil {
		return up.caPEM, nil
	}
	key := types.NamespacedName{Namespace: up.service.Namespace, Name: up.caSecret}
	sec, err := readCached[corev1.Secret](ctx, u, secretsGVR, key)
	if err != nil {
		return nil, fmt.Errorf("reading Secret %s for the operator's CA (%s): %w", key, AnnotationUpstreamCASecret, err)
	}
	b := sec.Data["ca.crt"]
	if len(b) == 0 {
		return nil, fmt.Errorf("Secret %s has no ca.crt to check the operator's certificate against (%s)", key, AnnotationUpstreamCASecret)
	}
	return b, nil
}

// client is the TLS client that trusts ca and checks the certificate for
// serverName.
func (u *upstreams) client(ca []byte, serverName string) (*http.Client, error) {
	h := sha256.Sum256(ca)
	key := fmt.Sprintf("%x/%s", h[:8], serverName)
	u.mu.Lock()
	defer u.mu.Unlock()
	if c := u.clients[key]; c != nil {
		return c, nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, errors.New("the operator's CA holds no PEM certificate")
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: serverName}
	t.DialContext = (&net.Dialer{Timeout: time.Second}).DialContext
	t.MaxIdleConnsPerHost = 4
	c := &http.Client{Transport: t}
	u.clients[key] = c
	return c, nil
}

// targetPort is the pod's port that Service port serves: a number, a
// container port's name, or port itself when unset.
func targetPort(svc *corev1.Service, port int32, pod *corev1.Pod) (int32, error) {
	for _, sp := range svc.Spec.Ports {
		if sp.Port != port {
			continue
		}
		switch {
		case sp.TargetPort.Type == intstr.String && sp.TargetPort.StrVal != "":
			for _, c := range pod.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name == sp.TargetPort.StrVal {
						return cp.ContainerPort, nil
					}
				}
			}
			return 0, fmt.Errorf("pod %s has no container port named %q (Service %s's targetPort)", pod.Name, sp.TargetPort.StrVal, svc.Name)
		case sp.TargetPort.IntVal != 0:
			return sp.TargetPort.IntVal, nil
		}
		return port, nil
	}
	return 0, fmt.Errorf("Service %s/%s has no port %d (annotation %s)", svc.Namespace, svc.Name, port, AnnotationUpstream)
}

// forwardUpstream is forward for an unchanged operator: its Deployment is
// woken, and the review goes to one of its pods directly (not through
// the Service, whose endpoints and proxy rules lag behind the pod's
// readiness), retried while the pod refuses connections or its webhook
// server is not serving yet.
func (p *proxy) forwardUpstream(ctx context.Context, rt *route, req *admissionv1.AdmissionRequest, body []byte) (int, []byte, error) {
	if p.targets == nil {
		return 0, nil, fmt.Errorf("this hub serves no Deployment sinks (operator %s's configuration has %s)", rt.operator, AnnotationUpstream)
	}
	up := rt.upstream
	svc, err := p.upstreams.service(ctx, up.service)
	if err != nil {
		return 0, nil, err
	}
	ca, err := p.upstreams.ca(ctx, up)
	if err != nil {
		return 0, nil, err
	}
	c, err := p.upstreams.client(ca, up.service.Name+"."+up.service.Namespace+".svc")
	if err != nil {
		return 0, nil, err
	}
	pods, done, err := p.targets.ServingPods(ctx, rt.operator, fmt.Sprintf("Admission: %s %s", req.Operation, resourceString(req)))
	if err != nil {
		return 0, nil, fmt.Errorf("waking the operator of Subscription %s: %w", rt.operator, err)
	}
	defer done()
	for {
		var last error
		for i := range pods {
			port, err := targetPort(svc, up.port, &pods[i])
			if err != nil {
				return 0, nil, err
			}
			base := "https://" + net.JoinHostPort(pods[i].Status.PodIP, strconv.Itoa(int(port)))
			code, b, err := p.call(ctx, c, base, rt, body, false)
			if err == nil {
				return code, b, nil
			}
			last = fmt.Errorf("pod %s: %w", pods[i].Name, err)
		}
		select {
		case <-ctx.Done():
			return 0, nil, errors.Join(ctx.Err(), last)
		case <-time.After(retryDial):
		}
	}
}
