package metacontroller

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// What a customize hook names is watched, as Metacontroller watches it:
//
//   - A resource the operator does not watch yet for the controller is
//     learned: added to the controller's status.relatedResources, and the
//     operator restarts (OnChange) once the sync is done. The next process
//     loads it (Controller.Learned) and watches it like Related: classic,
//     an informer; serverless, EnsureRelatedSources makes the event source
//     at start (the hub's Subscription gets the kind, or an ApiServerSource
//     is created).
//   - Each parent's last customize answer is kept in memory (answers): a
//     related object's change syncs the parents whose answer selects it,
//     and every parent whose answer this process has not seen (after a
//     restart, or a serverless cold start).

// learnedResources resolves status.relatedResources; a resource that no
// longer resolves (its CRD removed) is dropped, as are those Related names.
func learnedResources(c *Controller, in []v1alpha1.RelatedResource, m Mapper) []Resource {
	var out []Resource
	for _, r := range in {
		res, err := resolveResource(v1alpha1.ResourceRule{APIVersion: r.APIVersion, Resource: r.Resource}, m)
		if err != nil || c.watchesRelated(res.GVK) {
			continue
		}
		out = append(out, res)
	}
	return out
}

// watchesRelated: a change of an object of gvk syncs c's parents.
func (c *Controller) watchesRelated(gvk schema.GroupVersionKind) bool {
	for _, r := range append(append([]Resource(nil), c.Related...), c.Learned...) {
		if r.GVK.GroupKind() == gvk.GroupKind() {
			return true
		}
	}
	return false
}

// learning is what a Reconciler learned during this process.
type learning struct {
	mu      sync.Mutex
	learned map[string]bool // "<kind>/<controller>/<group>/<resource>"
	reason  string          // set: restart once the sync is done
}

// learn records that c's customize hook named res, which c does not watch
// yet: written to c's status.relatedResources; the operator restarts after
// the sync to watch it.
func (r *Reconciler) learn(ctx context.Context, c *Controller, res Resource) error {
	id := c.Kind + "/" + c.Name + "/" + res.GVR.Group + "/" + res.GVR.Resource
	r.learning.mu.Lock()
	defer r.learning.mu.Unlock()
	if r.learning.learned[id] {
		return nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind(c.Kind))
	if err := r.Client.Get(ctx, client.ObjectKey{Name: c.Name}, u); err != nil {
		return fmt.Errorf("reading %s %s to record the related resource %s: %w", c.Kind, c.Name, res.GVR.Resource, err)
	}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "relatedResources")
	entry := map[string]any{"apiVersion": res.GVR.GroupVersion().String(), "resource": res.GVR.Resource}
	has := false
	for _, x := range list {
		if m, ok := x.(map[string]any); ok && m["apiVersion"] == entry["apiVersion"] && m["resource"] == entry["resource"] {
			has = true
		}
	}
	if !has {
		list = append(list, entry)
		if err := unstructured.SetNestedSlice(u.Object, list, "status", "relatedResources"); err != nil {
			return err
		}
		if err := r.Client.Status().Update(ctx, u); err != nil {
			return fmt.Errorf("recording the related resource %s in the status of %s %s: %w", res.GVR.Resource, c.Kind, c.Name, err)
		}
	}
	if r.learning.learned == nil {
		r.learning.learned = map[string]bool{}
	}
	r.learning.learned[id] = true
	if r.learning.reason == "" {
		r.learning.reason = fmt.Sprintf("the customize hook of %s %s named %s, which is not watched yet", c.Kind, c.Name, res.GVR.GroupResource())
	}
	return nil
}

// learnedResync is when a sync that learned a resource is done again.
const learnedResync = 5 * time.Second

// restarting: this process learned something and restarts after its sync.
func (r *Reconciler) restarting() bool {
	r.learning.mu.Lock()
	defer r.learning.mu.Unlock()
	return r.learning.reason != ""
}

// restartIfLearned calls OnChange once something was learned.
func (r *Reconciler) restartIfLearned() {
	r.learning.mu.Lock()
	why := r.learning.reason
	r.learning.mu.Unlock()
	if why != "" && r.OnChange != nil {
		r.OnChange(why)
	}
}

// selection is one rule of a customize answer, resolved: what it selects.
type selection struct {
	gk        schema.GroupKind
	namespace string   // "" with a namespaced resource: every namespace
	names     []string // else sel
	sel       labels.Selector
}

func (s selection) selects(gk schema.GroupKind, ns, name string, lbls func() (map[string]string, bool)) bool {
	if s.gk != gk || (s.namespace != "" && s.namespace != ns) {
		return false
	}
	if len(s.names) > 0 {
		for _, n := range s.names {
			if n == name {
				return true
			}
		}
		return false
	}
	if s.sel == nil || s.sel.Empty() {
		return true
	}
	l, ok := lbls()
	return !ok || s.sel.Matches(labels.Set(l)) // gone: it may have matched
}

// answers keeps each parent's last customize answer (its selections).
type answers struct {
	mu sync.Mutex
	by map[string][]selection // "<controller kind>/<controller>/<namespace>/<parent>"
}

func answerKey(c *Controller, ns, name string) string {
	return c.Kind + "/" + c.Name + "/" + ns + "/" + name
}

func (a *answers) put(key string, s []selection) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[string][]selection{}
	}
	a.by[key] = s
}

// get is the parent's last answer; ok false if this process has not seen one.
func (a *answers) get(key string) ([]selection, bool) {
	if a == nil {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.by[key]
	return s, ok
}

// objectLabels reads obj's labels once, from obj when it carries its
// metadata (classic, Resource mode), else from the API server; false if it
// is gone.
func objectLabels(ctx context.Context, c client.Reader, gvk schema.GroupVersionKind, obj client.Object) func() (map[string]string, bool) {
	var once sync.Once
	var l map[string]string
	ok := true
	return func() (map[string]string, bool) {
		once.Do(func() {
			if obj.GetResourceVersion() != "" {
				l = obj.GetLabels()
				return
			}
			pom := &metav1.PartialObjectMetadata{}
			pom.SetGroupVersionKind(gvk)
			err := c.Get(ctx, client.ObjectKeyFromObject(obj), pom)
			if apierrors.IsNotFound(err) || err != nil {
				ok = false
				return
			}
			l = pom.Labels
		})
		return l, ok
	}
}
