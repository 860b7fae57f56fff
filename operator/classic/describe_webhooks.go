package classic

import (
	"cmp"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/conversion"

	"github.com/opzero/opzero/internal/description"
)

// convertPath is where controller-runtime's builder registers the
// conversion webhook.
const convertPath = "/convert"

// describeWebhooks is what the project registered on its webhook server,
// for `opzero manifests` (nil: nothing): the generated manifests have the
// hub forward the admission webhooks to the serverless binary, or (with
// --webhooks=always-on, and /convert always) serve them with
// --mode=webhooks.
func (m *adopted) describeWebhooks() *description.Webhooks {
	paths := m.webhooks.paths()
	if len(paths) == 0 {
		return nil
	}
	w := &description.Webhooks{Port: webhook.DefaultPort}
	if ds, ok := m.mo.WebhookServer.(*webhook.DefaultServer); ok {
		if ds.Options.Port != 0 {
			w.Port = ds.Options.Port
		}
		w.CertDir = ds.Options.CertDir
	}
	convert := false
	for _, p := range paths {
		if p == convertPath {
			convert = true
		} else if !slices.Contains(w.Paths, p) {
			w.Paths = append(w.Paths, p)
		}
	}
	sort.Strings(w.Paths)
	if convert {
		w.Conversion = conversionKinds(m.GetScheme())
	}
	return w
}

// conversionKinds are the kinds of scheme with several versions that
// /convert converts: those with a Hub and Convertible spokes.
// (controller-runtime v0.24's converter registry is not read: opzero
// supports v0.21, which has none.)
func conversionKinds(scheme *runtime.Scheme) []description.ConversionKind {
	if scheme == nil {
		return nil
	}
	versions := map[schema.GroupKind][]description.Version{}
	for gvk, t := range scheme.AllKnownTypes() {
		gk := gvk.GroupKind()
		versions[gk] = append(versions[gk], description.Version{Version: gvk.Version, GoPackage: t.PkgPath()})
	}
	var out []description.ConversionKind
	for gk, vs := range versions {
		if len(vs) < 2 {
			continue
		}
		ok := false
		if obj, err := scheme.New(gk.WithVersion(vs[0].Version)); err == nil {
			ok, _ = conversion.IsConvertible(scheme, obj)
		}
		if ok {
			slices.SortFunc(vs, func(a, b description.Version) int { return cmp.Compare(a.Version, b.Version) })
			out = append(out, description.ConversionKind{Group: gk.Group, Kind: gk.Kind, Versions: vs})
		}
	}
	slices.SortFunc(out, func(a, b description.ConversionKind) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Kind, b.Kind))
	})
	return out
}
