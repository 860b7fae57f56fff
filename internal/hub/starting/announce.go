package starting

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Announcements. A pod's address reaches the API server (its status, then
// the EndpointSlices) only when the kubelet next looks at the pod's
// containers (its relist, every second), about when it also finds the pod
// ready: too late to be of use. So the operator tells the hub itself, as
// soon as it listens: it POSTs an Announcement to AnnouncePath of every
// hub replica (a headless Service's addresses), authenticated by a token
// of its service account for the audience Audience (a projected volume of
// its Knative Service). The hub accepts it only from the service account
// the Knative Service runs as, and tries the address for AnnouncedFor, as
// long as no pod of that Service is ready.

// AnnouncePath is where a hub replica takes Announcements.
const AnnouncePath = "/v1/starting"

// Audience is the audience of the tokens that announce.
const Audience = "opzero-hub"

// TokenFile is where an operator's Knative Service mounts its service
// account's token for Audience (opzero manifests, the hub wiring).
const TokenFile = TokenDir + "/token"

// TokenDir is TokenFile's folder (the projected volume's mount).
const TokenDir = "/var/run/secrets/opzero.dev/hub"

// Announcement says that a pod of the Knative Service Service (in the
// namespace of the service account announcing) listens at Address
// (ip:port).
type Announcement struct {
	Service string `json:"service"`
	Address string `json:"address"`
}

var tokenReviews = schema.GroupVersionResource{Group: "authentication.k8s.io", Version: "v1", Resource: "tokenreviews"}

// Announce records that a pod of the Knative Service ns/name listens at
// addr (ip:port), for AnnouncedFor.
func (s *Services) Announce(ns, name, addr string) {
	s.Get(ns, name).announce("http://"+addr, time.Now())
}

// Handler takes Announcements (POST AnnouncePath): 204 when recorded; 401
// without a valid token for Audience; 403 when the token's service
// account is not the one the Knative Service runs as; 400 for anything
// that is not an Announcement of a pod address; 429 (Retry-After: 1)
// beyond AnnounceRate. Nothing is recorded unless it answers 204.
//
// Whoever reaches a hub replica's port can POST here, so what
// announcements make the hub ask the API server (a TokenReview, a GET of
// the Knative Service) is bounded: well-formed announcements are taken at
// AnnounceRate per second (burst AnnounceBurst) per replica, and the
// verdict on a token, accepted or not, is remembered for a minute (by its
// hash, at most reviewedMax tokens). A pod refused that way is still
// found in the EndpointSlices, and its events still go through its
// Knative Service: only the earlier delivery is lost.
func (s *Services) Handler() http.Handler {
	a := &announcer{s: s, reviewed: map[[sha256.Size]byte]reviewed{}, limit: rate.NewLimiter(AnnounceRate, AnnounceBurst)}
	return http.HandlerFunc(a.serve)
}

// AnnounceRate and AnnounceBurst bound the announcements per second that
// make a hub replica call the API server (a cold start of every operator
// at once, two hub replicas: a few per pod).
const (
	AnnounceRate  = 20
	AnnounceBurst = 100
)

// reviewedMax bounds the tokens whose verdicts are remembered.
const reviewedMax = 4096

type announcer struct {
	s     *Services
	limit *rate.Limiter

	mu       sync.Mutex
	reviewed map[[sha256.Size]byte]reviewed // the token's hash -> who, or why not, for a minute
}

type reviewed struct {
	ns, sa string
	err    error // the token was refused
	at     time.Time
}

func (a *announcer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "announcements are POSTed", http.StatusMethodNotAllowed)
		return
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		http.Error(w, "missing Authorization: Bearer <a service account token for audience "+Audience+">", http.StatusUnauthorized)
		return
	}
	var an Announcement
	body, err := io.ReadAll(io.LimitReader(r.Body, 4096))
	if err == nil {
		err = json.Unmarshal(body, &an)
	}
	if err == nil {
		err = an.check()
	}
	if err != nil {
		http.Error(w, "not an announcement: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !a.limit.Allow() {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "too many announcements; try again in a second", http.StatusTooManyRequests)
		return
	}
	ns, sa, err := a.review(r.Context(), tok)
	if err != nil {
		http.Error(w, "token rejected: "+err.Error(), http.StatusUnauthorized)
		return
	}
	runsAs, err := a.s.serviceAccount(r.Context(), ns, an.Service)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	if runsAs != sa {
		http.Error(w, fmt.Sprintf("service account %s/%s may not announce pods of Knative Service %s/%s (it runs as %s)", ns, sa, ns, an.Service, runsAs), http.StatusForbidden)
		return
	}
	a.s.Announce(ns, an.Service, an.Address)
	a.s.log.V(1).Info("a starting pod announced itself", "service", ns+"/"+an.Service, "address", an.Address)
	w.WriteHeader(http.StatusNoContent)
}

// check: a Knative Service's name and a pod's ip:port.
func (an Announcement) check() error {
	if errs := validation.IsDNS1035Label(an.Service); len(errs) > 0 {
		return fmt.Errorf("service %q: %s", an.Service, strings.Join(errs, "; "))
	}
	host, port, err := net.SplitHostPort(an.Address)
	if err != nil {
		return fmt.Errorf("address %q: want ip:port", an.Address)
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsLoopback() || ip.IsUnspecified() || ip.IsMulticast() {
		return fmt.Errorf("address %q: want a pod's IP", an.Address)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		n = -1
	}
	if errs := validation.IsValidPortNum(n); len(errs) > 0 {
		return fmt.Errorf("address %q: %s", an.Address, strings.Join(errs, "; "))
	}
	return nil
}

// review asks the API server who tok is (a TokenReview for Audience): a
// service account's namespace and name. The verdict is remembered for a
// minute, a refusal too (not a failure to ask).
func (a *announcer) review(ctx context.Context, tok string) (ns, sa string, err error) {
	key := sha256.Sum256([]byte(tok))
	a.mu.Lock()
	if r, ok := a.reviewed[key]; ok && time.Since(r.at) < time.Minute {
		a.mu.Unlock()
		return r.ns, r.sa, r.err
	}
	a.mu.Unlock()
	tr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
		"spec": map[string]any{"token": tok, "audiences": []any{Audience}}}}
	got, err := a.s.dyn.Resource(tokenReviews).Create(ctx, tr, metav1.CreateOptions{})
	if err != nil {
		return "", "", fmt.Errorf("reviewing the token: %w", err)
	}
	ns, sa, err = reviewedAs(got)
	a.remember(key, reviewed{ns: ns, sa: sa, err: err, at: time.Now()})
	return ns, sa, err
}

// reviewedAs is the service account a TokenReview's status names, or why
// the token is not one's.
func reviewedAs(tr *unstructured.Unstructured) (ns, sa string, err error) {
	if ok, _, _ := unstructured.NestedBool(tr.Object, "status", "authenticated"); !ok {
		msg, _, _ := unstructured.NestedString(tr.Object, "status", "error")
		return "", "", fmt.Errorf("not authenticated: %s", msg)
	}
	user, _, _ := unstructured.NestedString(tr.Object, "status", "user", "username")
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	ns, sa, ok2 := strings.Cut(rest, ":")
	if !ok || !ok2 {
		return "", "", fmt.Errorf("%s is not a service account", user)
	}
	return ns, sa, nil
}

// remember keeps a verdict for a minute, unless reviewedMax verdicts of
// the last minute are kept already.
func (a *announcer) remember(key [sha256.Size]byte, r reviewed) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, old := range a.reviewed {
		if time.Since(old.at) >= time.Minute {
			delete(a.reviewed, k)
		}
	}
	if len(a.reviewed) < reviewedMax {
		a.reviewed[key] = r
	}
}

// serviceAccount is the service account the Knative Service ns/name runs
// as ("default" when it names none), as read at most SpecFor ago: the
// follower of the same cold start has most often just read it.
func (s *Services) serviceAccount(ctx context.Context, ns, name string) (string, error) {
	c, err := s.read(ctx, types.NamespacedName{Namespace: ns, Name: name})
	if err != nil {
		return "", fmt.Errorf("the Knative Service %s/%s: %w", ns, name, err)
	}
	return c.sa, nil
}
