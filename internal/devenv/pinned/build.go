package pinned

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// install puts the named binaries into dir: those already there stay,
// others are linked from a folder with the same pins, the rest are built.
// One process at a time works on dir (a file lock), so test packages
// started together build once.
func (r *Resolver) install(ctx context.Context, dir string, names []string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating %s for opzero's pinned binaries: %w", dir, err)
	}
	// Every one there already (a build renames a finished binary into
	// place): nothing to wait for, so another process building other sets
	// into dir under the lock does not hold this one up.
	if !slices.ContainsFunc(names, func(n string) bool { return !executable(filepath.Join(dir, n)) }) {
		return nil
	}
	unlock, err := Lock(ctx, dir, r.progress())
	if err != nil {
		return err
	}
	defer unlock()
	todo := map[*group][]binary{}
	var order []*group
	for _, n := range names {
		g, b, _ := lookup(n)
		if executable(filepath.Join(dir, n)) {
			continue
		}
		if from := r.adopt(dir, g, b); from != "" {
			fmt.Fprintf(r.progress(), "opzero: linked %s from %s (built from the same pins)\n", n, from)
			continue
		}
		if todo[g] == nil {
			order = append(order, g)
		}
		todo[g] = append(todo[g], *b)
	}
	if len(order) == 0 {
		return nil
	}
	var all []string
	minutes := 0.0
	for _, g := range order {
		for _, b := range todo[g] {
			all = append(all, b.name)
			minutes += b.minutes
		}
	}
	fmt.Fprintf(r.progress(), "opzero: building %s from pinned Go modules into %s: %s (`opzero install` does this ahead of time)\n",
		strings.Join(all, ", "), dir, estimate(minutes, runtime.NumCPU()))
	t0 := time.Now()
	for _, g := range order {
		if err := r.build(ctx, dir, g, todo[g]); err != nil {
			return err
		}
	}
	fmt.Fprintf(r.progress(), "opzero: built %s in %s\n", strings.Join(all, ", "), time.Since(t0).Round(time.Second))
	return nil
}

// estimate says how long a build of work (minutes on 2 cores with a cold Go
// build cache) takes on cores.
func estimate(work float64, cores int) string {
	cores = max(cores, 1)
	m := int(math.Ceil(work * 2 / float64(cores)))
	unit := "minutes"
	if m <= 1 {
		m, unit = 1, "minute"
	}
	return fmt.Sprintf("about %d %s the first time on %d cores, a minute or two when Go's build cache already holds them", m, unit, cores)
}

// Lock takes an exclusive lock on dir/.lock, saying on w if it has to wait:
// one process at a time fills a cache folder.
func Lock(ctx context.Context, dir string, w io.Writer) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintf(w, "opzero: waiting for another opzero that is filling %s\n", dir)
		done := make(chan error, 1)
		go func() { done <- syscall.Flock(int(f.Fd()), syscall.LOCK_EX) }()
		select {
		case err = <-done:
		case <-ctx.Done():
			f.Close() // the waiting Flock fails with EBADF
			return nil, ctx.Err()
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", dir, err)
		}
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// adopt links b into dir from r.From or a sibling cache folder whose stamp
// for g matches these pins, and returns that folder ("" if none).
func (r *Resolver) adopt(dir string, g *group, b *binary) string {
	cands := append([]string(nil), r.From...)
	if cache, err := r.cache(); err == nil && filepath.Clean(dir) == filepath.Clean(cache) {
		siblings, _ := filepath.Glob(filepath.Join(filepath.Dir(cache), "*"))
		cands = append(cands, siblings...)
	}
	for _, c := range cands {
		src := filepath.Join(c, b.name)
		if same(c, dir) || !executable(src) {
			continue
		}
		if st, err := os.ReadFile(g.stampFile(c)); err != nil || strings.TrimSpace(string(st)) != g.stamp() {
			continue
		}
		if err := place(dir, b.name, func(tmp string) error { return linkOrCopy(src, tmp) }); err == nil && writeStamp(dir, g) == nil {
			return c
		}
	}
	return ""
}

func same(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func writeStamp(dir string, g *group) error {
	return os.WriteFile(g.stampFile(dir), []byte(g.stamp()+"\n"), 0o644)
}

// place makes dir/name appear at once: make writes a temporary file that
// is then renamed, so a reader never sees half a binary.
func place(dir, name string, make func(tmp string) error) error {
	tmp := filepath.Join(dir, "."+name+".tmp")
	_ = os.Remove(tmp)
	if err := make(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, name))
}

// linkOrCopy hard-links the file src names (through symlinks: bin/ links
// into a cache folder) to dst, or copies it across file systems.
func linkOrCopy(src, dst string) error {
	src, err := filepath.EvalSymlinks(src)
	if err != nil {
		return err
	}
	if os.Link(src, dst) == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// writeModule writes g's pinned module into dir/src/<group> and returns
// that folder.
func writeModule(dir string, g *group) (string, error) {
	src := filepath.Join(dir, "src", g.mod())
	for _, f := range g.files {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(p, g.file(f), 0o644); err != nil {
			return "", err
		}
	}
	return src, nil
}

// goEnv is the environment of the go commands run in a pinned module: the
// user's go.work and GOFLAGS must not change what the pins say.
func goEnv() []string {
	return append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
}

// env is goEnv for g: without cgo when its binaries go into images.
func (g *group) env() []string {
	if g.static {
		return append(goEnv(), "CGO_ENABLED=0")
	}
	return goEnv()
}

func (g *group) ldflags() string {
	if g.mod() != "controlplane" {
		return "-s -w"
	}
	v := g.require("k8s.io/kubernetes") // v1.34.3
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	major, minor := "1", "0"
	if len(parts) >= 2 {
		major, minor = parts[0], parts[1]
	}
	const p = "k8s.io/component-base/version"
	return fmt.Sprintf("-s -w -X %s.gitVersion=%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean", p, v, p, major, p, minor, p)
}

// build compiles bins of g into dir with `go build`, printing progress.
func (r *Resolver) build(ctx context.Context, dir string, g *group, bins []binary) error {
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("building %s needs Go (go on PATH) and the Go module proxy: install Go, or give --bin-dir / %s a folder with prebuilt binaries", g.name, Env)
	}
	src, err := writeModule(dir, g)
	if err != nil {
		return err
	}
	for _, b := range bins {
		t0 := time.Now()
		err := place(dir, b.name, func(tmp string) error { return goBuild(ctx, src, b, g.ldflags(), g.env(), tmp, r.progress()) })
		if err != nil {
			return err
		}
		fmt.Fprintf(r.progress(), "  built %s in %s\n", b.name, time.Since(t0).Round(time.Second))
		if err := writeStamp(dir, g); err != nil {
			return err
		}
	}
	return nil
}

// goBuild runs `go build -v` and turns its one line per compiled package
// into a progress bar every 10 s.
func goBuild(ctx context.Context, src string, b binary, ldflags string, env []string, out string, w io.Writer) error {
	total := countDeps(ctx, src, b.pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-v", "-trimpath", "-ldflags", ldflags, "-o", out, b.pkg)
	cmd.Dir, cmd.Env = src, env
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("building %s: %w", b.name, err)
	}
	var n atomic.Int64
	var errs []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := bufio.NewScanner(pr)
		for s.Scan() {
			line := s.Text()
			switch {
			case strings.HasPrefix(line, "#"), strings.Contains(line, ".go:"), strings.HasPrefix(line, "go: ") && !strings.HasPrefix(line, "go: downloading"):
				errs = append(errs, line)
			case strings.HasPrefix(line, "go: downloading"):
			default:
				n.Add(1)
			}
		}
	}()
	stop := make(chan struct{})
	t0 := time.Now()
	var ticking sync.WaitGroup // w is the caller's once goBuild returns
	ticking.Add(1)
	go func() {
		defer ticking.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				fmt.Fprintf(w, "  %s\n", bar(b.name, int(n.Load()), total, time.Since(t0)))
			}
		}
	}()
	err := cmd.Wait()
	pw.Close()
	wg.Wait()
	close(stop)
	ticking.Wait()
	if err != nil {
		return fmt.Errorf("building %s (go build %s in %s) failed: %w\n    %s", b.name, b.pkg, src, err, strings.Join(tail(errs, 30), "\n    "))
	}
	return nil
}

// bar renders one progress line: packages compiled of those the binary
// imports (cached ones are never compiled, so it may end early).
func bar(name string, n, total int, elapsed time.Duration) string {
	e := elapsed.Round(time.Second)
	if total <= 0 {
		return fmt.Sprintf("%-26s %5d packages compiled, %s elapsed", name, n, e)
	}
	frac := min(float64(n)/float64(total), 0.99)
	const width = 24
	full := int(frac * width)
	return fmt.Sprintf("%-26s [%s>%s] %3d%%  %d/%d packages, %s elapsed", name,
		strings.Repeat("=", full), strings.Repeat(" ", width-full), int(frac*100), n, total, e)
}

// countDeps is how many packages pkg builds from (0 if unknown).
func countDeps(ctx context.Context, src, pkg string) int {
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", pkg)
	cmd.Dir, cmd.Env = src, goEnv()
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	return strings.Count(string(out), "\n")
}

func tail(l []string, n int) []string {
	if len(l) > n {
		return l[len(l)-n:]
	}
	return l
}

// BuildMinutes is how long building a set of `opzero install` takes on 2
// cores with a cold Go build cache, rounded up: the estimate a build of the
// whole set prints, and the figure help texts quote.
func BuildMinutes(set string) (int, error) {
	gs, err := setGroups(set)
	if err != nil {
		return 0, err
	}
	work := 0.0
	for _, g := range gs {
		for _, b := range g.binaries {
			work += b.minutes
		}
	}
	return int(math.Ceil(work)), nil
}
