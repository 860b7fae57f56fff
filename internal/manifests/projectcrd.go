package manifests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ProjectCRDOptions reads the options a project gives controller-gen's
// crd generator in its Makefile (kubebuilder's manifests target:
// `$(CONTROLLER_GEN) rbac:roleName=manager-role crd:maxDescLen=0 webhook
// paths="./..." ...`): "maxDescLen=0", or "" when it gives none or has no
// Makefile. The file it read is returned for messages.
func ProjectCRDOptions(root string) (options, file string, err error) {
	path := filepath.Join(root, "Makefile")
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", "", nil
	}
	if err != nil {
		return "", path, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, "CONTROLLER_GEN)") && !strings.Contains(line, "controller-gen ") {
			continue
		}
		for _, f := range strings.Fields(line) {
			f = strings.Trim(f, `"'`)
			if o, ok := strings.CutPrefix(f, "crd:"); ok {
				return o, path, nil
			}
		}
	}
	return "", path, sc.Err()
}

// clientSideApplyLimit is the API server's bound on all of an object's
// annotations (262144 bytes), where client-side `kubectl apply` keeps a
// copy of the whole object.
const clientSideApplyLimit = 256 << 10

// warnLargeCRDs warns of each CRD too large for client-side apply.
func warnLargeCRDs(w io.Writer, crds []GeneratedCRD, optionsFrom string) {
	if w == nil {
		return
	}
	for _, c := range crds {
		if len(c.YAML) < clientSideApplyLimit*9/10 { // the annotation holds it as JSON, about as long
			continue
		}
		fix := "give controller-gen crd:maxDescLen=0 in the project's Makefile (opzero manifests uses the options it finds there)"
		if optionsFrom != "" {
			fix = "it was generated with the options of " + optionsFrom + "; add maxDescLen=0 there"
		}
		fmt.Fprintf(w, "warning: CRD %s is %d KiB: client-side kubectl apply (-k, -f) keeps a copy in an annotation limited to 256 KiB and would fail "+
			"(metadata.annotations: Too long); apply with kubectl apply --server-side, or %s\n", c.CRD.Name, len(c.YAML)>>10, fix)
	}
}
