package mountns

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
)

// Available is nil when a mount namespace can be made here (root), else
// why not.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("a mount namespace needs root here (unprivileged user namespaces are not used)")
	}
	return nil
}

// Command is a command that runs argv (argv[0] an absolute path) with
// environment env in folder dir, inside a mount namespace where every
// bind's Src is at its Dst; root is a folder of the caller's where the
// namespace's root is built (a tmpfs is mounted on root/root inside it).
// The caller may set Stdout, Stderr and SysProcAttr.Pdeathsig; the
// process's PID is argv's once the helper execs it.
func Command(root string, binds []Bind, dir string, argv, env []string) (*exec.Cmd, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if err := Check(binds); err != nil {
		return nil, err
	}
	// the helper starts in /: every path of the caller's made absolute
	abs := func(p *string) error {
		if *p == "" {
			return nil
		}
		a, err := filepath.Abs(*p)
		*p = a
		return err
	}
	binds = append([]Bind(nil), binds...)
	for i := range binds {
		if err := abs(&binds[i].Src); err != nil {
			return nil, err
		}
	}
	argv = append([]string(nil), argv...)
	for _, p := range []*string{&root, &dir, &argv[0]} {
		if err := abs(p); err != nil {
			return nil, err
		}
	}
	e, err := encode(spec{Root: root, Binds: binds, Dir: dir, Argv: argv})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"opzero-mountns"}
	cmd.Env = append(append([]string(nil), env...), e)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	return cmd, nil
}

// Main runs the helper and never returns when this process was started
// by Command; otherwise it returns at once.
func Main() {
	v, ok := os.LookupEnv(envSpec)
	if !ok {
		return
	}
	var s spec
	err := json.Unmarshal([]byte(v), &s)
	if err == nil {
		err = enter(s)
	}
	fmt.Fprintln(os.Stderr, "opzero: mount namespace:", err)
	os.Exit(127)
}

// enter builds the root, chroots into it and execs s.Argv; it returns
// only an error.
func enter(s spec) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := Check(s.Binds); err != nil {
		return err
	}
	nr := filepath.Join(s.Root, "root")
	if err := os.MkdirAll(nr, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", nr, "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("tmpfs on %s: %w", nr, err)
	}
	top, err := os.ReadDir("/")
	if err != nil {
		return err
	}
	for _, e := range top {
		if err := bind("/"+e.Name(), filepath.Join(nr, e.Name())); err != nil {
			return err
		}
	}
	for _, b := range sorted(s.Binds) {
		if err := bind(b.Src, filepath.Join(nr, path.Clean(b.Dst))); err != nil {
			return fmt.Errorf("mount path %s: %w", b.Dst, err)
		}
	}
	if err := syscall.Chroot(nr); err != nil {
		return fmt.Errorf("chroot %s: %w", nr, err)
	}
	dir := s.Dir
	if dir == "" {
		dir = "/"
	}
	if err := os.Chdir(dir); err != nil {
		return err
	}
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, envSpec+"=") {
			env = append(env, kv)
		}
	}
	return syscall.Exec(s.Argv[0], s.Argv, env)
}

// bind mounts src at dst (made if missing: a folder, an empty file, or
// src's link again for a symbolic link).
func bind(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		l, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if _, err := os.Lstat(dst); err == nil {
			return nil
		}
		return os.Symlink(l, dst)
	case fi.IsDir():
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	default:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if _, err := os.Stat(dst); err != nil {
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			f.Close()
		}
	}
	if err := syscall.Mount(src, dst, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	return nil
}
