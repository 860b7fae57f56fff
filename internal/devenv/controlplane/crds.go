package controlplane

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// InstallCRDs creates (or updates) every CustomResourceDefinition found in
// paths (files, or folders read one level deep for *.yaml, *.yml and *.json;
// other kinds in those files are skipped) and waits until each is
// Established, so the caller can use the new kinds at once.
func InstallCRDs(ctx context.Context, cfg *rest.Config, paths ...string) ([]string, error) {
	crds, err := ReadCRDs(paths...)
	if err != nil {
		return nil, err
	}
	cs, err := apiextclient.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	api := cs.ApiextensionsV1().CustomResourceDefinitions()
	names := make([]string, 0, len(crds))
	for _, crd := range crds {
		if err := createOrUpdate(ctx, api, crd); err != nil {
			return nil, fmt.Errorf("installing CRD %s: %w", crd.Name, err)
		}
		names = append(names, crd.Name)
	}
	for _, name := range names {
		if err := waitEstablished(ctx, cs, name); err != nil {
			return nil, err
		}
	}
	return names, nil
}

type crdAPI interface {
	Create(context.Context, *apiextv1.CustomResourceDefinition, metav1.CreateOptions) (*apiextv1.CustomResourceDefinition, error)
	Get(context.Context, string, metav1.GetOptions) (*apiextv1.CustomResourceDefinition, error)
	Update(context.Context, *apiextv1.CustomResourceDefinition, metav1.UpdateOptions) (*apiextv1.CustomResourceDefinition, error)
}

func createOrUpdate(ctx context.Context, api crdAPI, crd *apiextv1.CustomResourceDefinition) error {
	_, err := api.Create(ctx, crd, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := api.Get(ctx, crd.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	crd.ResourceVersion = cur.ResourceVersion
	_, err = api.Update(ctx, crd, metav1.UpdateOptions{})
	return err
}

func waitEstablished(ctx context.Context, cs apiextclient.Interface, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := cs.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not Established: %w", name, err)
	}
	return nil
}

// ReadCRDs parses the CustomResourceDefinitions in paths (see InstallCRDs).
func ReadCRDs(paths ...string) ([]*apiextv1.CustomResourceDefinition, error) {
	var files []string
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("CRD path: %w", err)
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			switch strings.ToLower(filepath.Ext(e.Name())) {
			case ".yaml", ".yml", ".json":
				files = append(files, filepath.Join(p, e.Name()))
			}
		}
	}
	var out []*apiextv1.CustomResourceDefinition
	for _, f := range files {
		crds, err := readCRDFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading CRDs from %s: %w", f, err)
		}
		out = append(out, crds...)
	}
	return out, nil
}

func readCRDFile(file string) ([]*apiextv1.CustomResourceDefinition, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	r := utilyaml.NewYAMLReader(bufioReader(b))
	var out []*apiextv1.CustomResourceDefinition
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, err
		}
		if meta.Kind != "CustomResourceDefinition" {
			continue
		}
		crd := &apiextv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(doc, crd); err != nil {
			return nil, err
		}
		out = append(out, crd)
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
