package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/opzero/opzero/internal/devenv/controlplane"
	"github.com/opzero/opzero/internal/proc"
)

const cgroupName = "opzero"

// down removes everything the recorded cluster made, in reverse: the
// pods' containers, the node's processes, containerd's shims, mounts under
// the state folder, the node's cgroups, the control plane, the network
// namespace (its links, routes and iptables rules go with it), the host's
// routes, the folders made outside the state folder, the kernel settings,
// and the state folder. It goes on past errors and returns them all.
func (c *Cluster) down(progress io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs []error
	note := func(step string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", step, err))
			fmt.Fprintf(progress, "  %s: %v\n", step, err)
			return
		}
		fmt.Fprintf(progress, "  %s\n", step)
	}
	sock := filepath.Join(c.Dir, "containerd", "containerd.sock")
	// Node processes first, kubelet before containerd (it would restart
	// what is killed), then every container through containerd.
	for _, name := range []string{"kube-scheduler", "kube-proxy", "kubelet"} {
		if pr := c.process(name); pr != nil {
			note("stopped "+name, pr.Stop(10*time.Second))
		}
	}
	if pr := c.process("containerd"); pr != nil && pr.Alive() {
		note("removed the pods' containers", removeContainers(ctx, sock))
		note("stopped containerd", pr.Stop(10*time.Second))
	}
	note("killed containerd's leftover shims", killShims(sock))
	note("unmounted everything under "+c.Dir, unmountUnder(c.Dir))
	note("removed the node's cgroups", removeCgroups())
	if c.PlaneDir != "" {
		if _, err := controlplane.Load(c.PlaneDir); err == nil {
			_, err := controlplane.Down(c.PlaneDir, false)
			note("stopped the control plane", err)
		}
	}
	if _, err := os.Stat(filepath.Join("/run/netns", NetNS)); err == nil {
		if n, err := killInNetNS(filepath.Join("/run/netns", NetNS)); n > 0 || err != nil {
			note(fmt.Sprintf("killed %d leftover processes in %s", n, NetNS), err)
		}
		note("deleted network namespace "+NetNS+" (its veth, bridge, routes and iptables rules)", run(ctx, "", "ip", "netns", "delete", NetNS))
	}
	for i := len(c.HostRoutes) - 1; i >= 0; i-- {
		r := c.HostRoutes[i]
		// The route through the veth went with it, or goes with it while
		// this runs: the kernel removes the namespace's veth peer after
		// `ip netns delete` returns, so a delete that fails on a route no
		// longer there is no leftover.
		shown := func() bool {
			out, _ := output(ctx, "", append([]string{"ip", "route", "show"}, routeKey(r)...)...)
			return strings.TrimSpace(out) != ""
		}
		if shown() {
			err := run(ctx, "", append([]string{"ip", "route", "del"}, r...)...)
			if err != nil && !shown() {
				err = nil
			}
			note("removed host route "+strings.Join(r, " "), err)
		}
	}
	for _, p := range slices.Backward(c.Created) {
		if p == filepath.Dir(c.Dir) {
			continue // the state folder's parent, after the state folder
		}
		if _, err := os.Lstat(p); err == nil {
			note("removed "+p+" (made by the node's programs)", removeMade(p))
		}
	}
	for k, v := range c.Sysctls {
		if b, err := os.ReadFile(filepath.Join("/proc/sys", k)); err == nil && strings.TrimSpace(string(b)) != v {
			note(fmt.Sprintf("restored %s to %s", strings.ReplaceAll(k, "/", "."), v), os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("cluster down left things behind (state kept in %s; run it again): %w", c.Dir, errors.Join(errs...))
	}
	note("removed "+c.Dir, os.RemoveAll(c.Dir))
	if slices.Contains(c.Created, filepath.Dir(c.Dir)) {
		_ = os.Remove(filepath.Dir(c.Dir)) // only if empty
	}
	return errors.Join(errs...)
}

// routeKey is what `ip route show` needs to find a recorded route: its
// type and prefix.
func routeKey(r []string) []string {
	if r[0] == "blackhole" {
		return []string{"type", "blackhole", r[1]}
	}
	return []string{r[0]}
}

func (c *Cluster) process(name string) *controlplane.Process {
	for _, p := range c.Processes {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// removeContainers kills and deletes every task and container in
// containerd's k8s.io namespace, so each shim exits and cleans up after
// itself (its socket, the pod's network namespace mount).
func removeContainers(ctx context.Context, sock string) error {
	ctr := func(args ...string) (string, error) {
		return output(ctx, "", append([]string{"ctr", "--address", sock, "-n", "k8s.io"}, args...)...)
	}
	tasks, err := ctr("tasks", "ls", "-q")
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range strings.Fields(tasks) {
		_, _ = ctr("tasks", "kill", "-s", "SIGKILL", id)
	}
	for _, id := range strings.Fields(tasks) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			_, err := ctr("tasks", "delete", id)
			if err != nil && strings.Contains(err.Error(), "not found") {
				err = nil // it exited and containerd removed it meanwhile
			}
			if err == nil || time.Now().After(deadline) {
				errs = append(errs, err)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	containers, err := ctr("containers", "ls", "-q")
	if err != nil {
		return err
	}
	for _, id := range strings.Fields(containers) {
		_, err := ctr("containers", "delete", id)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killShims SIGKILLs every containerd-shim-runc-v2 serving this cluster's
// containerd (its -address is sock) and the processes under it.
func killShims(sock string) error {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		argv := proc.Argv(pid)
		if len(argv) == 0 || filepath.Base(argv[0]) != "containerd-shim-runc-v2" || !slices.Contains(argv, sock) {
			continue
		}
		for _, d := range append(proc.Descendants(pid), pid) {
			if err := syscall.Kill(d, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killInNetNS SIGKILLs every process whose network namespace is the one
// at path (only the node's programs live there) and waits until they are
// gone, so deleting the namespace frees it with its links.
func killInNetNS(path string) (int, error) {
	var want syscall.Stat_t
	if err := syscall.Stat(path, &want); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) == nil && st.Ino == want.Ino && st.Dev == want.Dev {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			pids = append(pids, pid)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for !proc.Dead(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	return len(pids), nil
}

// unmountUnder detaches every mount under dir, deepest first.
func unmountUnder(dir string) error {
	var errs []error
	for range 3 { // a mount can hide another at the same path
		mounts, err := mountsUnder(dir)
		if err != nil || len(mounts) == 0 {
			return err
		}
		errs = nil
		for _, m := range slices.Backward(mounts) {
			if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	if mounts, _ := mountsUnder(dir); len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("still mounted: %s", strings.Join(mounts, ", ")))
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points under dir, in mount order.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescape(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, s.Err()
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroupDirs are the node's cgroup (kubelet's cgroupRoot) in every
// mounted hierarchy.
func cgroupDirs() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		line := s.Text()
		_, after, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		fstype := strings.Fields(after)[0]
		if fstype == "cgroup" || fstype == "cgroup2" {
			out = append(out, filepath.Join(unescape(strings.Fields(line)[4]), cgroupName))
		}
	}
	return out
}

// removeCgroups removes the node's cgroups, children first; cgroups empty
// out a moment after their processes die, so it retries for a while.
func removeCgroups() error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		var left []string
		for _, root := range cgroupDirs() {
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			for _, d := range slices.Backward(dirs) {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups still in use: %s", strings.Join(left, ", "))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// removeMade removes a folder the node's programs made outside the state
// folder, unmounting what is mounted under it first.
func removeMade(p string) error {
	if err := unmountUnder(p); err != nil {
		return err
	}
	return os.RemoveAll(p)
}
