package description_test

import (
	"bytes"
	"fmt"

	"github.com/opzero/opzero/internal/description"
)

func ExampleRead() {
	var buf bytes.Buffer
	_ = description.Write(&buf, description.Description{Mode: "serverless", Operators: []description.Controller{{
		Name:    "configwatcher",
		Primary: description.Kind{Group: "k8spatterns.io", Version: "v1", Kind: "ConfigWatcher", Resource: "configwatchers"},
	}}})
	d, err := description.Read(&buf)
	fmt.Println(d.Operators[0].Primary.APIVersion(), d.Operators[0].Primary.Resource, err)

	_, err = description.Read(bytes.NewBufferString(`{"apiVersion":"opzero.dev/describe/v0"}`))
	fmt.Println(err != nil)
	// Output:
	// k8spatterns.io/v1 configwatchers <nil>
	// true
}

// A description written by an older operator (v1, before Events) still reads.
func ExampleRead_v1() {
	d, err := description.Read(bytes.NewBufferString(`{"apiVersion":"opzero.dev/describe/v1","mode":"serverless","operators":[]}`))
	fmt.Println(d.APIVersion, err)
	// Output: opzero.dev/describe/v2 <nil>
}

// A watched kind's ReferencedBy round-trips; a field this reader does not
// know (a newer binary's) is refused with a hint, not dropped.
func ExampleRead_referencedBy() {
	var buf bytes.Buffer
	_ = description.Write(&buf, description.Description{Mode: "serverless", Operators: []description.Controller{{
		Name:    "configwatcher",
		Primary: description.Kind{Group: "k8spatterns.io", Version: "v1", Kind: "ConfigWatcher", Resource: "configwatchers"},
		Watched: []description.Kind{{Version: "v1", Kind: "ConfigMap", Resource: "configmaps", ReferencedBy: "spec.configMap"}},
	}}})
	d, err := description.Read(&buf)
	fmt.Println(d.Operators[0].Watched[0].ReferencedBy, err)

	_, err = description.Read(bytes.NewBufferString(`{"apiVersion":"opzero.dev/describe/v2","mode":"serverless","operators":[],"later":1}`))
	fmt.Println(err)
	// Output:
	// spec.configMap <nil>
	// an opzero operator description (opzero.dev/describe/v2 JSON) this opzero cannot read: json: unknown field "later"; build the operator and the opzero CLI from the same opzero version
}
