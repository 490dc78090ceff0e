package integration

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/vfile"
	"github.com/dsfs/dsfs/vfs"
	"github.com/dsfs/dsfs/views"
)

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestNoLeaksAcrossUnmount serves a mount in this process, reads every file
// through it with other processes, unmounts, and checks that no goroutine
// or file descriptor is left behind.
func TestNoLeaksAcrossUnmount(t *testing.T) {
	needMount(t)
	runtime.GC()
	goroutines, fds := runtime.NumGoroutine(), openFDs(t)

	cat, err := checkpoint.Open(tinySrc)
	if err != nil {
		t.Fatal(err)
	}
	set, err := views.Build(cat, views.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(8<<20, 2)
	dir := t.TempDir()
	m, err := vfs.Serve(dir, set.Root, vfile.CacheOpener(cache), vfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { m.Wait(); close(served) }()
	out := run(t, "sh", "-c", "find "+dir+" -type f -exec sha256sum {} + | wc -l")
	if n := strings.TrimSpace(out); n == "0" {
		t.Fatal("no files read through the mount")
	}
	if err := m.Unmount(); err != nil {
		t.Fatal(err)
	}
	<-served
	cache.Close()
	set.Close()
	cat.Close()

	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		g, f := runtime.NumGoroutine(), openFDs(t)
		if g <= goroutines && f <= fds {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("after unmount: %d goroutines (was %d), %d fds (was %d)\n%s", g, goroutines, f, fds, buf)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
