package manifests

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"

	admissionregv1 "k8s.io/api/admissionregistration/v1"
)

// projectWebhookDir is where a project keeps its webhook configurations
// (controller-gen writes manifests.yaml there from the markers; a project
// without markers writes its own).
const projectWebhookDir = "config/webhook"

// ProjectWebhooks reads the webhook configurations the project declares in
// YAML (root's config/webhook/*.yaml) and returns their webhooks whose
// service path the binary registers (paths) and no marker already names
// (marked): a project that declares its webhooks there, not with
// +kubebuilder:webhook markers, gets them configured as the markers'
// would be; so are those of rendered (Options.ProjectManifests, by file).
// files maps each returned webhook's name to its file, relative to dir
// (for errors). A file that does not parse is an error naming it.
func ProjectWebhooks(root, dir string, rendered map[string][]byte, paths []string, marked []string) (mut []admissionregv1.MutatingWebhook, val []admissionregv1.ValidatingWebhook, files map[string]string, err error) {
	read, err := projectYAML(root, projectWebhookDir, dir, false)
	if err != nil {
		return nil, nil, nil, err
	}
	maps.Copy(read, rendered)
	files = map[string]string{}
	keep := func(file, name string, cc admissionregv1.WebhookClientConfig) bool {
		p := webhookPath(cc)
		if p == "" || !slices.Contains(paths, p) || slices.Contains(marked, p) {
			return false
		}
		marked = append(marked, p)
		files[name] = file
		return true
	}
	err = eachObject(read, func(file, kind string, raw []byte) error {
		switch kind {
		case "MutatingWebhookConfiguration":
			var c admissionregv1.MutatingWebhookConfiguration
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			for _, w := range c.Webhooks {
				if keep(file, w.Name, w.ClientConfig) {
					mut = append(mut, w)
				}
			}
		case "ValidatingWebhookConfiguration":
			var c admissionregv1.ValidatingWebhookConfiguration
			if err := json.Unmarshal(raw, &c); err != nil {
				return err
			}
			for _, w := range c.Webhooks {
				if keep(file, w.Name, w.ClientConfig) {
					val = append(val, w)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the project's webhook configurations: %w", err)
	}
	return mut, val, files, nil
}
