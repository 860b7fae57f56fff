package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/opzero/opzero/internal/devenv/image"
	"github.com/opzero/opzero/internal/devenv/interp"
)

// CommandAnnotation names the local command `opzero dev` runs for a
// Knative Service or a Deployment instead of its image (a JSON array:
// program, arguments; relative paths from the build folder). On the
// cluster, ResolveCommands builds that command's image.
const CommandAnnotation = "dev.opzero.dev/command"

// AppDir is where a command image holds the files of the command's
// folder (the build folder's relative paths under it) and its working
// folder.
const AppDir = "/app"

// ResolveCommands gives every Knative Service and Deployment of manifest
// annotated CommandAnnotation (a hook in Python or JavaScript that `opzero
// dev` runs as a local process) an image built here from that command, as
// ResolveKo does for ko:// images: the program (found as `opzero dev`
// finds it, a Debian interpreter preferred to a shim: /usr/bin, /bin
// first), the shared libraries ldd lists for it, Python's standard library
// for a python3 (with the libraries of its extension modules), and every
// file of the folders of the arguments that name files under buildDir, at
// AppDir/<relative path>; the entrypoint is the command, run in AppDir as
// user 65532. The images are imported into the node as
// opzero.local/command/<name>:<hash of the files> and replace the first
// container's image; a container's own command and args are left as they
// are. Nothing else changes: the same file is what `opzero dev -f` runs.
// It returns the new manifest and each object's image (<kind>/<namespace>/
// <name> -> reference).
func (c *Cluster) ResolveCommands(ctx context.Context, buildDir, manifest string) (string, map[string]string, error) {
	return resolveCommands(ctx, buildDir, manifest, c.Import)
}

// resolveCommands is ResolveCommands with the images imported by load.
func resolveCommands(ctx context.Context, buildDir, manifest string, load func(context.Context, ...image.Spec) ([]image.Built, error)) (string, map[string]string, error) {
	docs := strings.Split(manifest, "\n---")
	type target struct {
		doc  int
		obj  *unstructured.Unstructured
		spec image.Spec
		hook *interp.Hook // a recognized interpreter image: its command is replaced too
	}
	var targets []target
	for i, doc := range docs {
		if !strings.Contains(doc, CommandAnnotation) && !strings.Contains(doc, "configMap") {
			continue
		}
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil || obj.Object == nil {
			continue
		}
		v, ok := obj.GetAnnotations()[CommandAnnotation]
		if !ok && commandWorkload(obj) && obj.GetKind() == "Deployment" { // as opzero dev runs it
			if h, err := interp.Recognize(obj); err == nil {
				spec, err := InterpreterImage(ctx, strings.ToLower(obj.GetName()), h.Program)
				if err != nil {
					return "", nil, fmt.Errorf("%s %s: the image of %s: %w", obj.GetKind(), obj.GetName(), h.Program, err)
				}
				targets = append(targets, target{doc: i, obj: obj, spec: spec, hook: h})
			}
			continue
		}
		if !ok || !commandWorkload(obj) {
			continue
		}
		var argv []string
		if err := json.Unmarshal([]byte(v), &argv); err != nil || len(argv) == 0 || argv[0] == "" {
			return "", nil, fmt.Errorf("%s %s: annotation %s %q: want a JSON array of the program and its arguments", obj.GetKind(), obj.GetName(), CommandAnnotation, v)
		}
		spec, err := CommandImage(ctx, buildDir, strings.ToLower(obj.GetName()), argv)
		if err != nil {
			return "", nil, fmt.Errorf("%s %s: the image of %s: %w", obj.GetKind(), obj.GetName(), v, err)
		}
		targets = append(targets, target{doc: i, obj: obj, spec: spec})
	}
	if len(targets) == 0 {
		return manifest, nil, nil
	}
	specs := make([]image.Spec, len(targets))
	for i, t := range targets {
		specs[i] = t.spec
	}
	built, err := load(ctx, specs...)
	if err != nil {
		return "", nil, err
	}
	refs := map[string]string{}
	for i, t := range targets {
		containers, _, _ := unstructured.NestedSlice(t.obj.Object, "spec", "template", "spec", "containers")
		first, _ := containers[0].(map[string]any)
		first["image"] = built[i].Ref
		if h := t.hook; h != nil { // the program's path in the image, the script where the ConfigMap is mounted
			first["command"] = append([]any{t.spec.Path}, toAny(h.Args)...)
			delete(first, "args")
		}
		if err := unstructured.SetNestedSlice(t.obj.Object, containers, "spec", "template", "spec", "containers"); err != nil {
			return "", nil, err
		}
		out, err := yaml.Marshal(t.obj.Object)
		if err != nil {
			return "", nil, err
		}
		docs[t.doc] = "\n" + string(out)
		refs[t.obj.GetKind()+"/"+t.obj.GetNamespace()+"/"+t.obj.GetName()] = built[i].Ref
	}
	return strings.Join(docs, "\n---"), refs, nil
}

// commandWorkload reports whether o is a workload `opzero dev` runs from
// CommandAnnotation: a Knative Service or a Deployment with a container.
func commandWorkload(o *unstructured.Unstructured) bool {
	switch o.GroupVersionKind().GroupKind().String() {
	case "Service.serving.knative.dev", "Deployment.apps":
	default:
		return false
	}
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return false
	}
	_, ok := containers[0].(map[string]any)
	return ok
}

// CommandImage is the image of argv run in buildDir (see ResolveCommands),
// named command/<name>.
func CommandImage(ctx context.Context, buildDir, name string, argv []string) (image.Spec, error) {
	prog, files, err := interpreterFiles(ctx, argv[0])
	if err != nil {
		return image.Spec{}, err
	}
	absBuild, err := filepath.Abs(buildDir)
	if err != nil {
		return image.Spec{}, err
	}
	dirs := map[string]bool{}
	for _, a := range argv[1:] {
		p := a
		if !filepath.IsAbs(p) {
			p = filepath.Join(absBuild, p)
		}
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() {
			continue
		}
		rel, err := filepath.Rel(absBuild, p)
		if err != nil || strings.HasPrefix(rel, "..") {
			return image.Spec{}, fmt.Errorf("%s is outside the build folder %s", a, buildDir)
		}
		dirs[filepath.Dir(rel)] = true
	}
	if len(dirs) == 0 {
		return image.Spec{}, fmt.Errorf("no argument of %q names a file in the build folder %s (the script the image must hold)", argv, buildDir)
	}
	for d := range dirs {
		entries, err := os.ReadDir(filepath.Join(absBuild, d))
		if err != nil {
			return image.Spec{}, err
		}
		for _, e := range entries {
			if e.Type().IsRegular() {
				files = append(files, image.File{Path: path.Join(AppDir, filepath.ToSlash(d), e.Name()), Source: filepath.Join(absBuild, d, e.Name())})
			}
		}
	}
	args := slices.Clone(argv[1:])
	for i, a := range args {
		if filepath.IsAbs(a) {
			if rel, err := filepath.Rel(absBuild, a); err == nil && !strings.HasPrefix(rel, "..") {
				args[i] = path.Join(AppDir, filepath.ToSlash(rel))
			}
		}
	}
	return image.Spec{Name: "command/" + name, Binary: prog, Path: prog, Args: args, Files: files, WorkDir: AppDir}, nil
}

// interpreterFiles finds a program (see program) and lists what it needs
// in an image: the libraries ldd lists, and Python's standard library for
// a python.
func interpreterFiles(ctx context.Context, name string) (string, []image.File, error) {
	prog, err := program(name)
	if err != nil {
		return "", nil, err
	}
	files, err := sharedLibraries(ctx, prog)
	if err != nil {
		return "", nil, err
	}
	if strings.HasPrefix(filepath.Base(prog), "python") {
		lib, err := pythonStdlib(ctx, prog)
		if err != nil {
			return "", nil, err
		}
		files = append(files, lib...)
	}
	return prog, files, nil
}

// program finds a command's program as an ELF file: a name is looked up in
// /usr/bin and /bin first (Debian's interpreters, not a version manager's
// shim script), then on $PATH; symbolic links are resolved.
func program(name string) (string, error) {
	var candidates []string
	if strings.Contains(name, "/") {
		candidates = []string{name}
	} else {
		candidates = []string{"/usr/bin/" + name, "/bin/" + name}
		if p, err := exec.LookPath(name); err == nil {
			candidates = append(candidates, p)
		}
	}
	for _, p := range candidates {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		if isELF(real) {
			return filepath.Abs(real)
		}
	}
	return "", fmt.Errorf("no executable ELF file for %q (looked at %s); install it (Debian: apt-get install python3 or nodejs)", name, strings.Join(candidates, ", "))
}

func isELF(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	magic := make([]byte, 4)
	_, err = f.Read(magic)
	return err == nil && bytes.Equal(magic, []byte("\x7fELF"))
}

// lddPath is a library path in ldd's output: "libc.so.6 => /lib/...
// (0x...)" or the loader "/lib64/ld-linux-x86-64.so.2 (0x...)".
var lddPath = regexp.MustCompile(`(?:=>\s+)?(/\S+)\s+\(0x`)

// sharedLibraries lists the libraries ldd names for bins, each at the
// path the program asks for (the file a symbolic link points to is
// copied there). A static binary has none.
func sharedLibraries(ctx context.Context, bins ...string) ([]image.File, error) {
	var files []image.File
	seen := map[string]bool{}
	for _, bin := range bins {
		out, err := exec.CommandContext(ctx, "ldd", bin).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "not a dynamic executable") {
				continue
			}
			return nil, fmt.Errorf("ldd %s: %w: %s", bin, err, out)
		}
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "not found") {
				return nil, fmt.Errorf("ldd %s: %s", bin, strings.TrimSpace(line))
			}
			m := lddPath.FindStringSubmatch(line)
			if m == nil || seen[m[1]] {
				continue
			}
			seen[m[1]] = true
			files = append(files, image.File{Path: m[1], Source: m[1]})
		}
	}
	return files, nil
}

// stdlibSkip are the folders of Python's standard library a hook does not
// need: tests, Tk, IDLE, pip's bootstrap, 2to3, the static library and
// makefiles for building extensions, third-party packages.
var stdlibSkip = regexp.MustCompile(`^(site-packages|dist-packages|test|tests|idlelib|tkinter|turtledemo|ensurepip|lib2to3|config-.*)$`)

// pythonStdlib lists python's standard library (what sysconfig names
// "stdlib", at its own path, so the interpreter finds it from its prefix)
// and the libraries its extension modules link.
func pythonStdlib(ctx context.Context, python string) ([]image.File, error) {
	out, err := exec.CommandContext(ctx, python, "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])").Output()
	if err != nil {
		return nil, fmt.Errorf("%s: where is its standard library: %w", python, err)
	}
	root := strings.TrimSpace(string(out))
	var files []image.File
	var exts []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && stdlibSkip.MatchString(d.Name()) {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Stat(p) // follows links; a dangling one is left out
		if err != nil || !st.Mode().IsRegular() {
			return nil
		}
		files = append(files, image.File{Path: p, Source: p})
		if strings.HasSuffix(p, ".so") {
			exts = append(exts, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	libs, err := sharedLibraries(ctx, exts...)
	if err != nil {
		return nil, err
	}
	return append(files, libs...), nil
}

// InterpreterImage is the image that plays a recognized interpreter image
// (package interp: python, node) for a hook hosted as Metacontroller's
// published examples host theirs, its script in a ConfigMap the pod
// mounts: the program (found as CommandImage finds it) and what it needs,
// no script. It runs as root, as the public images it replaces do (their
// hooks listen on port 80); the workload's command names the program's
// path in the image.
func InterpreterImage(ctx context.Context, name, program string) (image.Spec, error) {
	prog, files, err := interpreterFiles(ctx, program)
	if err != nil {
		return image.Spec{}, err
	}
	return image.Spec{Name: "command/" + name, Binary: prog, Path: prog, Files: files, User: "0:0"}, nil
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
