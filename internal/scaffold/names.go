package scaffold

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/gobuffalo/flect"
	"golang.org/x/mod/module"
	"k8s.io/apimachinery/pkg/util/validation"
)

var (
	groupRe   = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	versionRe = regexp.MustCompile(`^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$`)
	kindRe    = regexp.MustCompile(`^[A-Z][A-Za-z0-9]*$`)
)

func checkDomain(domain string) error {
	if domain == "" {
		return fmt.Errorf("--domain is required: the API groups' suffix, e.g. --domain example.com gives groups like cache.example.com")
	}
	if errs := validation.IsDNS1123Subdomain(domain); len(errs) > 0 {
		return fmt.Errorf("--domain %q is not a DNS subdomain (%s): use lower case letters, digits, '-' and '.', e.g. example.com", domain, strings.Join(errs, "; "))
	}
	return nil
}

func checkRepo(repo string) error {
	if repo == "" {
		return fmt.Errorf("--repo is required: the Go module path of the project, e.g. --repo example.com/myoperator")
	}
	if err := module.CheckPath(repo); err != nil {
		return fmt.Errorf("--repo %q is not a Go module path (%v): use e.g. github.com/you/myoperator", repo, err)
	}
	return nil
}

func checkProjectName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("project name %q is not a DNS label (%s): name the folder in lower case letters, digits and '-', or set --project-name", name, strings.Join(errs, "; "))
	}
	return nil
}

func checkGVK(group, version, kind, domain string) error {
	var missing []string
	for _, f := range []struct{ flag, value, example string }{{"--group", group, "cache"}, {"--version", version, "v1alpha1"}, {"--kind", kind, "Memcached"}} {
		if f.value == "" {
			missing = append(missing, f.flag+" "+f.example)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("name the kind: %s are required, e.g. %s", "--group, --version and --kind", strings.Join(missing, " "))
	}
	var errs []string
	if !groupRe.MatchString(group) {
		errs = append(errs, fmt.Sprintf("--group %q: want lower case letters and digits starting with a letter, e.g. cache (the API group becomes <group>.%s)", group, domain))
	} else if e := validation.IsDNS1123Subdomain(group + "." + domain); len(e) > 0 {
		errs = append(errs, fmt.Sprintf("--group %q: %s.%s is not a DNS subdomain (%s)", group, group, domain, strings.Join(e, "; ")))
	}
	if !versionRe.MatchString(version) {
		errs = append(errs, fmt.Sprintf("--version %q: want a Kubernetes API version such as v1, v1beta1 or v1alpha1", version))
	}
	if !kindRe.MatchString(kind) {
		errs = append(errs, fmt.Sprintf("--kind %q: want an upper camel case name of letters and digits, e.g. Memcached", kind))
	} else if e := validation.IsDNS1035Label(plural(kind)); len(e) > 0 {
		errs = append(errs, fmt.Sprintf("--kind %q: its resource name %q is not a DNS label (%s)", kind, plural(kind), strings.Join(e, "; ")))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

// plural is the resource name of kind, as controller-gen derives it for the
// CRD (flect's plural, lower case).
func plural(kind string) string { return strings.ToLower(flect.Pluralize(kind)) }
