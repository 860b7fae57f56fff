package interp_test

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/interp"
)

// A hook Deployment as Metacontroller publishes them runs on the local
// python3, with its ConfigMap's files under a local folder.
func Example() {
	u := &unstructured.Unstructured{}
	_ = yaml.Unmarshal([]byte(`
apiVersion: apps/v1
kind: Deployment
metadata: {name: hook, namespace: metacontroller}
spec:
  template:
    spec:
      containers:
      - name: controller
        image: python:3.11
        command: [python, /hooks/sync.py]
        volumeMounts: [{name: hooks, mountPath: /hooks}]
      volumes: [{name: hooks, configMap: {name: hook}}]
`), &u.Object)
	h, err := interp.Recognize(u)
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "interp-example-")
	defer os.RemoveAll(dir)
	args, _, err := h.Materialize(dir, func(name string) (*unstructured.Unstructured, error) {
		return &unstructured.Unstructured{Object: map[string]any{"data": map[string]any{"sync.py": "print('hello')"}}}, nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(h.Program, args[0] == dir+"/hooks/sync.py")
	// Output: python3 true
}
