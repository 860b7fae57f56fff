package trim

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestEvictFileDropsCachedPages: a file's clean pages in the page cache
// are gone from it after evictFile (as the hub's executable's are after
// NowAlwaysOn), counted with mincore on a mapping that touches none.
func TestEvictFileDropsCachedPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "image")
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil { // clean pages: the kernel drops only those
		t.Fatal(err)
	}
	if _, err := io.ReadAll(f); err != nil {
		t.Fatal(err)
	}
	before := resident(t, f, len(data))
	if before == 0 {
		t.Skip("the file's pages are not in the page cache after a read (a filesystem without one)")
	}
	if err := evictFile(path); err != nil {
		t.Fatal(err)
	}
	if after := resident(t, f, len(data)); after > before/10 {
		t.Errorf("resident pages: %d before, %d after evictFile; want almost none after", before, after)
	}
	if err := evictFile(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("evictFile of a missing file: no error")
	}
}

func resident(t *testing.T, f *os.File, size int) int {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (size+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}
