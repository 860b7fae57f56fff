package trim

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// dropImage unmaps the executable's r-x and r--p mappings from this
// process (MADV_DONTNEED), skipping any that holds a private copy of a page
// (smaps' Anonymous), which dropping would revert.
func dropImage() {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return
	}
	defer f.Close()
	type span struct{ lo, hi uintptr }
	var spans []span
	var cur *span
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fs := strings.Fields(line)
		if len(fs) >= 6 && strings.Contains(fs[0], "-") {
			cur = nil
			if fs[5] != exe || (fs[1] != "r-xp" && fs[1] != "r--p") {
				continue
			}
			lo, hi, _ := strings.Cut(fs[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				continue
			}
			spans = append(spans, span{uintptr(l), uintptr(h)})
			cur = &spans[len(spans)-1]
			continue
		}
		if cur != nil && len(fs) >= 2 && fs[0] == "Anonymous:" && fs[1] != "0" {
			spans = spans[:len(spans)-1] // a written page: keep the mapping as is
			cur = nil
		}
	}
	for _, s := range spans {
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.lo, s.hi-s.lo, syscall.MADV_DONTNEED)
	}
}

// evictImage drops from the page cache the executable's pages that no
// process maps (evictFile).
func evictImage() { _ = evictFile("/proc/self/exe") }

// evictFile asks the kernel to drop path's clean pages from the page
// cache (POSIX_FADV_DONTNEED): the kernel keeps those a process maps, and
// drops the rest, which it would otherwise keep charged to the memory
// cgroup of whoever read them first until it needs the memory (kubelet
// counts them in that container's working set while they are on the
// active list).
func evictFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
