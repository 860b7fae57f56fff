package hub_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/hub"
	"github.com/opzero/opzero/internal/hub/admission"
	"github.com/opzero/opzero/internal/testkit"
	"github.com/opzero/opzero/testenv"
)

// unchangedWebhook is an unchanged operator's webhook server: TLS with a
// certificate for its Service's name that its own CA signed, denying
// ConfigMaps labelled bad=yes; each call may be held for hold.
type unchangedWebhook struct {
	port  int32
	ca    []byte
	calls atomic.Int64
	hold  atomic.Int64 // nanoseconds
	auth  atomic.Value // the last Authorization header
}

func newUnchangedWebhook(t *testing.T, service string) *unchangedWebhook {
	ca := testkit.NewCA(t)
	crt, key := ca.Leaf(t, service, x509.ExtKeyUsageServerAuth, service)
	pair, err := tls.X509KeyPair(crt, key)
	must(t, err)
	w := &unchangedWebhook{ca: ca.PEM}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.calls.Add(1)
		w.auth.Store(r.Header.Get("Authorization"))
		time.Sleep(time.Duration(w.hold.Load()))
		var rev admissionv1.AdmissionReview
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/validate--v1-configmap" || json.Unmarshal(b, &rev) != nil || rev.Request == nil {
			http.Error(rw, "not a review for /validate--v1-configmap", http.StatusBadRequest)
			return
		}
		var cm corev1.ConfigMap
		_ = json.Unmarshal(rev.Request.Object.Raw, &cm)
		resp := &admissionv1.AdmissionResponse{UID: rev.Request.UID, Allowed: cm.Labels["bad"] != "yes"}
		if !resp.Allowed {
			resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: "the unchanged operator refuses bad=yes"}
		}
		rev.Response, rev.Request = resp, nil
		_ = json.NewEncoder(rw).Encode(rev)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	w.port = int32(n)
	return w
}

// startAdmission serves the hub's admission endpoint on 127.0.0.1 with a
// certificate of the test's CA (as under opzero dev: CertDir), waking
// Deployment sinks through h; it returns the endpoint's URL and CA.
func startAdmission(t *testing.T, h *hub.Hub) (string, []byte) {
	ca := testkit.NewCA(t)
	crt, key := ca.Leaf(t, "hub", x509.ExtKeyUsageServerAuth)
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "tls.crt"), crt, 0o600))
	must(t, os.WriteFile(filepath.Join(dir, "tls.key"), key, 0o600))
	s, err := admission.New(testenv.Get(t).Config, admission.Options{Addr: "127.0.0.1:0", CertDir: dir, NoEarly: true, Targets: h})
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := s.Start(ctx)
	must(t, err)
	t.Cleanup(func() { cancel(); s.Wait() })
	return "https://" + addr.String(), ca.PEM
}

// viaHub is the ValidatingWebhookConfiguration `opzero hub adopt` writes
// for an unchanged operator: its webhook on the namespace's ConfigMaps
// labelled webhooked=yes, calling the hub for Subscription sub, the
// operator's Service and CA in annotations.
func viaHub(ns, sub, hubURL string, hubCA []byte, ann map[string]string) *admissionregv1.ValidatingWebhookConfiguration {
	u := hubURL + admission.Path(ns, sub, "tok", "/validate--v1-configmap")
	a := map[string]string{admission.AnnotationOperator: ns + "/" + sub}
	for k, v := range ann {
		a[k] = v
	}
	return &admissionregv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-" + sub, Labels: map[string]string{admission.LabelViaHub: "true"}, Annotations: a},
		Webhooks: []admissionregv1.ValidatingWebhook{{Name: "vconfigmap.example.com",
			ClientConfig: admissionregv1.WebhookClientConfig{URL: &u, CABundle: hubCA},
			Rules: []admissionregv1.RuleWithOperations{{Operations: []admissionregv1.OperationType{admissionregv1.Create},
				Rule: admissionregv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": ns}},
			ObjectSelector:          &metav1.LabelSelector{MatchLabels: map[string]string{"webhooked-by": sub}},
			FailurePolicy:           ptr.To(admissionregv1.Fail),
			SideEffects:             ptr.To(admissionregv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(10)),
		}},
	}
}

// webhookService is the operator's own Service for its webhook server.
func webhookService(ns, name, deployment string, target int32) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": deployment},
			Ports: []corev1.ServicePort{{Port: 443, TargetPort: intstr.FromInt32(target)}}}}
}

// TestUnchangedWebhookAtZero (real API server): the API server's call of
// an unchanged operator's webhook, through the hub, wakes its Deployment
// from zero and is answered by the operator's own server once its pod is
// ready, within the webhook's timeout, with no hub token sent to it; the
// Deployment is not stopped while a call is under way, and goes back to
// zero once idle. Bad input: a configuration without the operator's CA is
// not served (its calls fail as the failurePolicy says), and one whose
// Subscription is not Ready wakes nothing.
func TestUnchangedWebhookAtZero(t *testing.T) {
	env, ctx, ns := withReader(t)
	c := env.Client
	h, _ := startHub(t, hub.Options{NoWakeups: true})
	hubURL, hubCA := startAdmission(t, h)
	op := newUnchangedWebhook(t, "op-webhook-service."+ns+".svc")

	must(t, c.Create(ctx, operatorDeployment(ns, "op", 0)))
	must(t, c.Create(ctx, webhookService(ns, "op-webhook-service", "op", op.port)))
	sub := deploymentSub(ns, "op", "op", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}, LabelSelector: "watched=yes"})
	sub.Spec.ScaleToZero = &v1alpha1.ScaleToZero{IdleAfter: &metav1.Duration{Duration: 2 * time.Second}}
	must(t, c.Create(ctx, sub))
	condition(t, ns, "op", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	waitState(t, ns, "op", v1alpha1.TargetZero)
	must(t, c.Create(ctx, viaHub(ns, "op", hubURL, hubCA, map[string]string{
		admission.AnnotationUpstream:   "op-webhook-service",
		admission.AnnotationUpstreamCA: base64.StdEncoding.EncodeToString(op.ca)})))

	// create makes a ConfigMap the webhook sees while the test plays the
	// kubelet for the woken pod (Ready, or running with its readiness
	// probe not passed yet: the webhook server answers before it); it
	// returns the API server's answer.
	ready := true
	create := func(name string, bad bool) error {
		cm := configMap(ns, name, nil)
		cm.Labels = map[string]string{"webhooked-by": "op"}
		if bad {
			cm.Labels["bad"] = "yes"
		}
		errc := make(chan error, 1)
		go func() { errc <- c.Create(ctx, cm) }()
		select {
		case err := <-errc:
			return err // answered without a wake: the operator was up
		case <-time.After(300 * time.Millisecond):
		}
		waitReplicas(t, ns, "op", 1, "an admission call at zero")
		if ready {
			readyPod(t, ns, "op")
		} else {
			runningPod(t, ns, "op")
			defer readyPod(t, ns, "op") // its probe passes later
		}
		return <-errc
	}

	// Three calls at zero, each after the operator went back to zero; the
	// second one's pod is running, not Ready.
	for i := range 3 {
		ready = i != 1
		waitReplicas(t, ns, "op", 0, "idle")
		before := op.calls.Load()
		err := create(fmt.Sprintf("bad-%d", i), true)
		// The API server and the hub learn of the new configuration each by
		// its own watch: admitted before the API server saw it, or refused
		// 404 by a hub that did not know its path yet: again.
		for end := time.Now().Add(30 * time.Second); i == 0 && time.Now().Before(end) &&
			(err == nil || strings.Contains(err.Error(), "the server could not find the requested resource")); {
			if err == nil {
				must(t, c.Delete(ctx, configMap(ns, "bad-0", nil)))
			}
			time.Sleep(200 * time.Millisecond)
			err = create("bad-0", true)
		}
		if err == nil || !strings.Contains(err.Error(), "the unchanged operator refuses bad=yes") {
			t.Fatalf("call %d at zero: %v, want the operator's own denial", i, err)
		}
		if op.calls.Load() == before {
			t.Fatalf("call %d: the operator's server was not called", i)
		}
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("status.target after call %d: wakes %d, the admission call the reason", i, i+1), func(context.Context) (bool, error) {
			st := targetStatus(t, ns, "op")
			return st.Wakes == int64(i+1) && strings.Contains(st.LastWakeReason, "Admission: CREATE v1/configmaps"), nil
		})
	}
	if a, _ := op.auth.Load().(string); a != "" {
		t.Errorf("the unchanged operator got Authorization %q: the hub's tokens are not for it", a)
	}
	// Up: answered at once, allowed.
	if err := create("good", false); err != nil {
		t.Fatalf("a good ConfigMap while up: %v", err)
	}

	// A call that takes longer than the idle period keeps it up.
	op.hold.Store(int64(4 * time.Second))
	errc := make(chan error, 1)
	go func() {
		cm := configMap(ns, "slow", nil)
		cm.Labels = map[string]string{"webhooked-by": "op"}
		errc <- c.Create(ctx, cm)
	}()
	stays(t, ns, "op", 1, 3500*time.Millisecond, "an admission call is under way")
	if err := <-errc; err != nil {
		t.Fatalf("the slow call: %v", err)
	}
	op.hold.Store(0)
	waitReplicas(t, ns, "op", 0, "idle after the slow call")

	// Bad input: no CA for the operator's certificate: not served, so the
	// call fails (failurePolicy Fail) and nothing is woken.
	must(t, c.Create(ctx, operatorDeployment(ns, "noca", 0)))
	nocaSub := deploymentSub(ns, "noca", "noca", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}, LabelSelector: "watched=yes"})
	must(t, c.Create(ctx, nocaSub))
	condition(t, ns, "noca", v1alpha1.SubscriptionReady, metav1.ConditionTrue, "")
	must(t, c.Create(ctx, viaHub(ns, "noca", hubURL, hubCA, map[string]string{admission.AnnotationUpstream: "op-webhook-service"})))
	// A Subscription that is not Ready (its Deployment does not exist).
	must(t, c.Create(ctx, deploymentSub(ns, "gone", "not-there", v1alpha1.SubscribedResource{APIVersion: "v1", Kind: "ConfigMap", Namespaces: []string{ns}})))
	condition(t, ns, "gone", v1alpha1.SubscriptionReady, metav1.ConditionFalse, "")
	must(t, c.Create(ctx, viaHub(ns, "gone", hubURL, hubCA, map[string]string{
		admission.AnnotationUpstream: "op-webhook-service", admission.AnnotationUpstreamCA: base64.StdEncoding.EncodeToString(op.ca)})))
	for name, want := range map[string]string{"noca": "failed calling webhook", "gone": "is not Ready"} {
		testkit.Eventually(t, 30*time.Second, "the call for "+name+" refused by the hub with "+want, func(ctx context.Context) (bool, error) {
			cm := configMap(ns, "for-"+name, nil)
			cm.Labels = map[string]string{"webhooked-by": name}
			err := c.Create(ctx, cm)
			if err == nil {
				return false, fmt.Errorf("ConfigMap for %s admitted: the webhook's failurePolicy Fail should have refused it", name)
			}
			t.Logf("%s: %v", name, err)
			return strings.Contains(err.Error(), want), nil
		})
	}
	stays(t, ns, "noca", 0, time.Second, "its webhook is not served")
}

// runningPod plays the kubelet for the Deployment's pod as a readiness
// probe lagging behind the container leaves it: running, with an
// address, not Ready.
func runningPod(t *testing.T, ns, deployment string) {
	t.Helper()
	c := testenv.Get(t).Client
	testkit.Eventually(t, 30*time.Second, "a pod of "+deployment+" to mark running", func(ctx context.Context) (bool, error) {
		var l corev1.PodList
		if err := c.List(ctx, &l, client.InNamespace(ns), client.MatchingLabels{"app": deployment}); err != nil {
			return false, err
		}
		for _, p := range l.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			now := metav1.Now()
			p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, "127.0.0.1", []corev1.PodIP{{IP: "127.0.0.1"}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
			if c.Status().Update(ctx, &p) == nil {
				return true, nil
			}
		}
		return false, nil
	})
}
