package describe_test

import (
	"bytes"
	"fmt"

	"github.com/opzero/opzero/describe"
)

func ExampleRead() {
	var buf bytes.Buffer
	_ = describe.Write(&buf, describe.Description{Mode: "serverless", Operators: []describe.Operator{{
		Name:    "configwatcher",
		Primary: describe.Kind{Group: "k8spatterns.io", Version: "v1", Kind: "ConfigWatcher", Resource: "configwatchers"},
	}}})
	d, err := describe.Read(&buf)
	fmt.Println(d.Operators[0].Primary.APIVersion(), d.Operators[0].Primary.Resource, err)

	_, err = describe.Read(bytes.NewBufferString(`{"apiVersion":"opzero.dev/describe/v0"}`))
	fmt.Println(err != nil)
	// Output:
	// k8spatterns.io/v1 configwatchers <nil>
	// true
}
