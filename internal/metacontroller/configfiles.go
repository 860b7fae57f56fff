package metacontroller

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	v1alpha1 "github.com/opzero/opzero/internal/metacontroller/api/v1alpha1"
)

// The controllers' configuration read from YAML files instead of the API
// server (LoadFiles: OPZERO_METACONTROLLER_FILES, what `opzero manifests`
// describes with no cluster), and the FileMapper that resolves their
// resources from the CRDs among the files and the built-in kinds.

// FileMapper resolves resources without an API server: from the CRDs among
// the files, then from the built-in kinds (client-go's, apiextensions' and
// apiregistration's). `opzero manifests` runs the operator so
// (OPZERO_DESCRIBE), with no cluster. TestFileMapperAgreesWithTheAPIServer
// checks it against a real API server's discovery.
type FileMapper struct {
	m *meta.DefaultRESTMapper
}

// KindFor implements Mapper. A core resource ("v1", group "") is the core
// group's: the default mapper reads an empty group as any group, so v1
// events would match events.k8s.io's Event too.
func (f *FileMapper) KindFor(r schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	kinds, err := f.m.KindsFor(r)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	var exact []schema.GroupVersionKind
	for _, k := range kinds {
		if k.Group == r.Group && (r.Version == "" || k.Version == r.Version) {
			exact = append(exact, k)
		}
	}
	if len(exact) == 1 {
		return exact[0], nil
	}
	return f.m.KindFor(r)
}

// RESTMapping implements Mapper.
func (f *FileMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return f.m.RESTMapping(gk, versions...)
}

// clusterScoped are the built-in cluster-scoped kinds (Kubernetes 1.34).
var clusterScoped = map[string]bool{
	"Namespace": true, "Node": true, "PersistentVolume": true, "ComponentStatus": true,
	"ClusterRole": true, "ClusterRoleBinding": true,
	"CustomResourceDefinition": true, "APIService": true,
	"StorageClass": true, "CSIDriver": true, "CSINode": true, "VolumeAttachment": true, "VolumeAttributesClass": true,
	"PriorityClass": true, "RuntimeClass": true,
	"CertificateSigningRequest": true, "ClusterTrustBundle": true,
	"IngressClass": true, "IPAddress": true, "ServiceCIDR": true,
	"ValidatingWebhookConfiguration": true, "MutatingWebhookConfiguration": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
	"MutatingAdmissionPolicy": true, "MutatingAdmissionPolicyBinding": true,
	"DeviceClass": true, "ResourceSlice": true, "DeviceTaintRule": true,
	"FlowSchema": true, "PriorityLevelConfiguration": true,
	"StorageVersion": true, "StorageVersionMigration": true,
	"TokenReview": true, "SubjectAccessReview": true, "SelfSubjectAccessReview": true,
	"SelfSubjectRulesReview": true, "SelfSubjectReview": true,
}

// builtinKinds are the kinds the API server serves without a CRD.
func builtinKinds() []schema.GroupVersionKind {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = apiextv1.AddToScheme(s)
	out := []schema.GroupVersionKind{{Group: "apiregistration.k8s.io", Version: "v1", Kind: "APIService"}}
	for gvk := range s.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || gvk.Version == "__internal" || gvk.Version == runtime.APIVersionInternal ||
			strings.HasSuffix(gvk.Kind, "Options") || gvk.Kind == "WatchEvent" || gvk.Kind == "Status" || gvk.Kind == "APIGroup" ||
			gvk.Kind == "APIVersions" || gvk.Kind == "APIResourceList" || gvk.Kind == "APIGroupList" {
			continue
		}
		out = append(out, gvk)
	}
	return out
}

func newFileMapper(crds []apiextv1.CustomResourceDefinition) *FileMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for _, gvk := range builtinKinds() {
		scope := meta.RESTScopeNamespace
		if clusterScoped[gvk.Kind] {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	for _, c := range crds {
		scope := meta.RESTScopeNamespace
		if c.Spec.Scope == apiextv1.ClusterScoped {
			scope = meta.RESTScopeRoot
		}
		for _, v := range c.Spec.Versions {
			gvk := schema.GroupVersionKind{Group: c.Spec.Group, Version: v.Name, Kind: c.Spec.Names.Kind}
			m.AddSpecific(gvk, gvk.GroupVersion().WithResource(c.Spec.Names.Plural),
				gvk.GroupVersion().WithResource(c.Spec.Names.Singular), scope)
		}
	}
	return &FileMapper{m: m}
}

// LoadFiles reads controllers (and the CRDs of their resources) from YAML
// files or folders of them, for an operator that describes itself.
func LoadFiles(paths []string) (*Config, error) {
	var ccs []v1alpha1.CompositeController
	var dcs []v1alpha1.DecoratorController
	var crds []apiextv1.CustomResourceDefinition
	for _, p := range paths {
		files, err := yamlFiles(p)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			if err := readDocs(f, &ccs, &dcs, &crds); err != nil {
				return nil, err
			}
		}
	}
	if len(ccs)+len(dcs) == 0 {
		return nil, fmt.Errorf("no CompositeController or DecoratorController in %s", strings.Join(paths, ", "))
	}
	return resolve(ccs, dcs, newFileMapper(crds))
}

func yamlFiles(p string) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var out []string
	err = filepath.WalkDir(p, func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			out = append(out, path)
		}
		return err
	})
	return out, err
}

func readDocs(file string, ccs *[]v1alpha1.CompositeController, dcs *[]v1alpha1.DecoratorController, crds *[]apiextv1.CustomResourceDefinition) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", file, err)
		}
		var tm metav1.TypeMeta
		if len(raw) == 0 || json.Unmarshal(raw, &tm) != nil {
			continue
		}
		var err error
		switch {
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "CompositeController":
			var c v1alpha1.CompositeController
			if err = json.Unmarshal(raw, &c); err == nil {
				*ccs = append(*ccs, c)
			}
		case tm.APIVersion == v1alpha1.GroupVersion.String() && tm.Kind == "DecoratorController":
			var c v1alpha1.DecoratorController
			if err = json.Unmarshal(raw, &c); err == nil {
				*dcs = append(*dcs, c)
			}
		case tm.Kind == "CustomResourceDefinition":
			var c apiextv1.CustomResourceDefinition
			if err = json.Unmarshal(raw, &c); err == nil {
				*crds = append(*crds, c)
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %s: %w", file, tm.Kind, err)
		}
	}
}
