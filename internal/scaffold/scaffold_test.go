package scaffold

import (
	"context"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/mod/modfile"
)

// checkout is the opzero checkout the tests run in (the replace target).
func checkout(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil || !isOpzeroModule(dir) {
		t.Fatalf("the tests run inside the opzero checkout: %v", err)
	}
	return dir
}

// snapshot is every file under dir with its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		if !d.IsDir() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[strings.TrimPrefix(p, dir)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok || a != b {
			t.Errorf("%s changed or removed %s", what, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s wrote %s", what, p)
		}
	}
}

func newProject(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "memcached-operator")
	err := Init(context.Background(), InitOptions{Dir: dir, Domain: "example.com", Repo: "example.com/memcached-operator",
		Owner: "The Memcached Authors", OpzeroReplace: checkout(t), SkipTidy: true})
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInitWritesTheProject(t *testing.T) {
	dir := newProject(t)
	for _, f := range []string{"go.mod", "PROJECT", "cmd/main.go", "Makefile", "README.md", "hack/boilerplate.go.txt", ".gitignore"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("init did not write %s: %v", f, err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "go.mod"))
	mf, err := modfile.Parse("go.mod", b, nil)
	if err != nil {
		t.Fatalf("go.mod: %v\n%s", err, b)
	}
	if mf.Module.Mod.Path != "example.com/memcached-operator" || len(mf.Replace) != 1 || mf.Replace[0].New.Path != checkout(t) ||
		len(mf.Tool) != 1 || mf.Tool[0].Path != "sigs.k8s.io/controller-tools/cmd/controller-gen" {
		t.Errorf("go.mod: module %s, replace %v, tool %v\n%s", mf.Module.Mod.Path, mf.Replace, mf.Tool, b)
	}
	p, err := LoadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	if p.ProjectName != "memcached-operator" || p.Domain != "example.com" || p.Repo != "example.com/memcached-operator" {
		t.Errorf("PROJECT: %+v", p)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "hack/boilerplate.go.txt")); !strings.Contains(string(b), "The Memcached Authors") {
		t.Errorf("boilerplate without the owner:\n%s", b)
	}
}

// TestGoVersion: generated projects ask for the Go version opzero needs.
func TestGoVersion(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(checkout(t), "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	mf, err := modfile.Parse("go.mod", b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if mf.Go.Version != GoVersion {
		t.Errorf("GoVersion %s, opzero's go.mod says %s", GoVersion, mf.Go.Version)
	}
}

func TestInitRefusesAndWritesNothing(t *testing.T) {
	tmp := t.TempDir()
	full := filepath.Join(tmp, "full")
	if err := os.MkdirAll(filepath.Join(full, ".git"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "main.go"), []byte("package main\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notOpzero := t.TempDir()
	good := InitOptions{Domain: "example.com", Repo: "example.com/op", OpzeroReplace: checkout(t), SkipTidy: true}
	for _, tc := range []struct {
		name string
		dir  string
		edit func(*InitOptions)
		want string
	}{
		{"non-empty folder", full, func(*InitOptions) {}, "is not empty (main.go)"},
		{"no domain", filepath.Join(tmp, "a"), func(o *InitOptions) { o.Domain = "" }, "--domain is required"},
		{"bad domain", filepath.Join(tmp, "a"), func(o *InitOptions) { o.Domain = "Example_com" }, "is not a DNS subdomain"},
		{"no repo", filepath.Join(tmp, "a"), func(o *InitOptions) { o.Repo = "" }, "--repo is required"},
		{"bad repo", filepath.Join(tmp, "a"), func(o *InitOptions) { o.Repo = "example.com/a b" }, "is not a Go module path"},
		{"bad project name", filepath.Join(tmp, "My_Op"), func(*InitOptions) {}, "not a DNS label"},
		{"bad owner", filepath.Join(tmp, "a"), func(o *InitOptions) { o.Owner = "a */ b" }, "--owner"},
		{"replace is no checkout", filepath.Join(tmp, "a"), func(o *InitOptions) { o.OpzeroReplace = notOpzero }, "give the folder of an opzero checkout"},
		{"no replace and no version", filepath.Join(tmp, "a"), func(o *InitOptions) { o.OpzeroReplace = "" }, "--opzero-replace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := good
			o.Dir = tc.dir
			tc.edit(&o)
			before := snapshot(t, tmp)
			err := Init(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Init: %v, want an error with %q", err, tc.want)
			}
			t.Log(err)
			sameFiles(t, "a refused init", before, snapshot(t, tmp))
			if _, err := os.Stat(filepath.Join(tmp, "a")); err == nil {
				t.Errorf("a refused init created its folder")
			}
		})
	}
	// --force writes into the folder and leaves other files alone.
	o := good
	o.Dir, o.Force = full, true
	if err := Init(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(full, "main.go")); string(b) != "package main\n" {
		t.Errorf("--force changed a file init does not write")
	}
	if _, err := os.Stat(filepath.Join(full, "PROJECT")); err != nil {
		t.Errorf("--force wrote no PROJECT: %v", err)
	}
}

func createAPI(dir, group, version, kind string, controller bool) error {
	return CreateAPI(context.Background(), APIOptions{Dir: dir, Group: group, Version: version, Kind: kind,
		Resource: true, Controller: controller, SkipGenerate: true})
}

func TestCreateAPIWritesTheKind(t *testing.T) {
	dir := newProject(t)
	if err := createAPI(dir, "cache", "v1alpha1", "Memcached", true); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"api/v1alpha1/memcached_types.go", "api/v1alpha1/groupversion_info.go", "config/samples/cache_v1alpha1_memcached.yaml",
		"internal/controller/memcached_controller.go", "internal/controller/memcached_controller_test.go", "internal/controller/suite_test.go"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("create api did not write %s: %v", f, err)
		}
	}
	types, _ := os.ReadFile(filepath.Join(dir, "api/v1alpha1/memcached_types.go"))
	for _, m := range []string{"+kubebuilder:object:root=true", "+kubebuilder:subresource:status", "+kubebuilder:printcolumn:name=\"Ready\""} {
		if !strings.Contains(string(types), m) {
			t.Errorf("memcached_types.go lacks %s", m)
		}
	}
	ctrl, _ := os.ReadFile(filepath.Join(dir, "internal/controller/memcached_controller.go"))
	for _, m := range []string{"+kubebuilder:rbac:groups=cache.example.com,resources=memcacheds,", "builder.ControllerManagedBy(rt)", "WithAutoObservedGeneration()", "reconcileutil.SetReady"} {
		if !strings.Contains(string(ctrl), m) {
			t.Errorf("memcached_controller.go lacks %s", m)
		}
	}
	// controller-tools reads a marker after any spaces: only the three
	// markers meant are there.
	if n := len(regexp.MustCompile(`(?m)^//\s*\+kubebuilder:rbac`).FindAll(ctrl, -1)); n != 3 {
		t.Errorf("memcached_controller.go has %d +kubebuilder:rbac markers, want 3", n)
	}
	// A second kind of the same version, without a controller: the
	// version is registered once; a kind of a new version is registered.
	if err := createAPI(dir, "cache", "v1alpha1", "MemcachedBackup", false); err != nil {
		t.Fatal(err)
	}
	if err := createAPI(dir, "cache", "v1beta1", "Memcached", false); err != nil {
		t.Fatal(err)
	}
	main, _ := os.ReadFile(filepath.Join(dir, "cmd/main.go"))
	if _, err := parser.ParseFile(token.NewFileSet(), "main.go", main, 0); err != nil {
		t.Fatalf("cmd/main.go: %v\n%s", err, main)
	}
	for s, n := range map[string]int{
		"cachev1alpha1.AddToScheme(scheme)": 1, "cachev1beta1.AddToScheme(scheme)": 1,
		"controller.MemcachedReconciler{": 1, `"example.com/memcached-operator/internal/controller"`: 1,
	} {
		if got := strings.Count(string(main), s); got != n {
			t.Errorf("cmd/main.go has %s %d times, want %d\n%s", s, got, n, main)
		}
	}
	p, err := LoadProject(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Resources) != 3 || !p.Resources[0].Controller || p.Resources[1].Controller || p.Resources[2].Path != "example.com/memcached-operator/api/v1beta1" {
		t.Errorf("PROJECT resources: %+v", p.Resources)
	}
}

func TestCreateAPIRefusesAndWritesNothing(t *testing.T) {
	dir := newProject(t)
	if err := createAPI(dir, "cache", "v1alpha1", "Memcached", true); err != nil {
		t.Fatal(err)
	}
	noMarker := newProject(t)
	b, _ := os.ReadFile(filepath.Join(noMarker, "cmd/main.go"))
	_ = os.WriteFile(filepath.Join(noMarker, "cmd/main.go"), []byte(strings.ReplaceAll(string(b), builderMarker, "")), 0o644)
	for _, tc := range []struct {
		name                 string
		dir                  string
		group, version, kind string
		resource, controller bool
		want                 string
	}{
		{"kind exists", dir, "cache", "v1alpha1", "Memcached", true, true, "exists already"},
		{"second controller", dir, "cache", "v1alpha1", "Other", true, true, "has a controller already (for Memcached)"},
		{"another group", dir, "web", "v1alpha1", "Site", true, false, "a project has one API group"},
		{"bad group", dir, "Cache", "v1alpha1", "Other", true, false, "--group \"Cache\""},
		{"bad version", dir, "cache", "1", "Other", true, false, "--version \"1\""},
		{"bad kind", dir, "cache", "v1alpha1", "other", true, false, "--kind \"other\""},
		{"controller for no kind", dir, "cache", "v1alpha1", "Nothing", false, true, "has no kind Nothing"},
		{"no kind", dir, "cache", "v1alpha1", "", true, true, "--group, --version and --kind are required, e.g. --kind Memcached"},
		{"nothing to do", dir, "cache", "v1alpha1", "Other", false, false, "nothing to create"},
		{"not a project", t.TempDir(), "cache", "v1alpha1", "Other", true, true, "has no PROJECT file"},
		{"marker gone", noMarker, "cache", "v1alpha1", "Memcached", true, true, "+kubebuilder:scaffold:builder"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := snapshot(t, tc.dir)
			err := CreateAPI(context.Background(), APIOptions{Dir: tc.dir, Group: tc.group, Version: tc.version, Kind: tc.kind,
				Resource: tc.resource, Controller: tc.controller, SkipGenerate: true})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CreateAPI: %v, want an error with %q", err, tc.want)
			}
			t.Log(err)
			sameFiles(t, "a refused create api", before, snapshot(t, tc.dir))
		})
	}
}
