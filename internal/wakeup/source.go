package wakeup

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/opzero/opzero/api/v1alpha1"
	"github.com/opzero/opzero/internal/wakeup/wakesource"
)

// The wakeup source lives in package wakesource, which links neither
// controller-runtime nor client-go's typed clients (the hub runs it); these
// names keep it where its users found it.
type (
	// Source delivers due Wakeups (wakesource.Source).
	Source = wakesource.Source
	// SourceOptions configures a Source.
	SourceOptions = wakesource.SourceOptions
)

// Labels and defaults of the wakeup source.
const (
	OperatorLabel     = wakesource.OperatorLabel
	DueBucketLabel    = wakesource.DueBucketLabel
	BucketSeconds     = wakesource.BucketSeconds
	DefaultWindow     = wakesource.DefaultWindow
	DefaultWatchGrace = wakesource.DefaultWatchGrace
)

// DueBucket is the DueBucketLabel value for a due time.
var DueBucket = wakesource.DueBucket

// NewSource returns a Source reading and deleting Wakeups through c.
func NewSource(c client.WithWatch, o SourceOptions) *Source {
	return wakesource.NewSource(crRecords{c}, o)
}

// crRecords reads and deletes Wakeups through a controller-runtime client.
type crRecords struct{ c client.WithWatch }

func (r crRecords) List(ctx context.Context, ns string, opts metav1.ListOptions) (*v1alpha1.WakeupList, error) {
	l := &v1alpha1.WakeupList{}
	err := r.c.List(ctx, l, &client.ListOptions{Namespace: ns, Limit: opts.Limit, Continue: opts.Continue, Raw: &opts})
	return l, err
}

func (r crRecords) Watch(ctx context.Context, ns string, opts metav1.ListOptions) (watch.Interface, error) {
	return r.c.Watch(ctx, &v1alpha1.WakeupList{}, &client.ListOptions{Namespace: ns, Raw: &opts})
}

func (r crRecords) Delete(ctx context.Context, ns, name, rv string) error {
	w := &v1alpha1.Wakeup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	return r.c.Delete(ctx, w, client.Preconditions{ResourceVersion: &rv})
}
