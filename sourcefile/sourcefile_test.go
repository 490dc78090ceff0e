package sourcefile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"
)

var content = []byte("0123456789abcdefghijklmnopqrstuvwxyz")

// write creates path with content and an mtime in the past, as a
// checkpoint file downloaded earlier has.
func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	past := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(path, past, past); err != nil {
		t.Fatal(err)
	}
}

func TestUnchangedReads(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	write(t, p, content)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 10)
	if n, err := f.ReadAt(buf, 3); n != 10 || err != nil || !bytes.Equal(buf, content[3:13]) {
		t.Fatalf("ReadAt: %d %v %q", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, int64(len(content))-4); n != 4 || err != io.EOF {
		t.Fatalf("read across the end: %d, %v; want 4, io.EOF", n, err)
	}
	if mtime := time.Unix(f.id.mtime.Unix()); f.Size() != int64(len(content)) || !mtime.Equal(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)) {
		t.Fatalf("size %d, mtime %v", f.Size(), mtime)
	}
	fd, err := f.Reopen()
	if err != nil {
		t.Fatalf("Reopen of an unchanged file: %v", err)
	}
	syscall.Close(fd)
}

// TestChangesAreCaught changes the file in each way a checkpoint file can
// change under a mount; each read after it fails, for good.
func TestChangesAreCaught(t *testing.T) {
	tests := []struct {
		name   string
		change func(t *testing.T, p string)
		how    string
	}{
		{"truncated", func(t *testing.T, p string) { os.Truncate(p, 10) }, "truncated from 36 to 10 bytes"},
		{"grown", func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			f.Write([]byte("more"))
			f.Close()
		}, "grown from 36 to 40 bytes"},
		{"rewritten in place, mtime put back", func(t *testing.T, p string) {
			fi, _ := os.Stat(p)
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt([]byte("X"), 5)
			f.Close()
			os.Chtimes(p, fi.ModTime(), fi.ModTime())
			if now, _ := os.Stat(p); !now.ModTime().Equal(fi.ModTime()) || now.Size() != fi.Size() {
				t.Fatal("the change did not keep size and mtime")
			}
		}, "rewritten"},
		{"replaced by rename", func(t *testing.T, p string) {
			tmp := p + ".tmp"
			write(t, tmp, bytes.ToUpper(content))
			fi, _ := os.Stat(p)
			os.Chtimes(tmp, fi.ModTime(), fi.ModTime())
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		}, "replaced by another file"},
		{"removed", func(t *testing.T, p string) { os.Remove(p) }, "no longer at its path (no such file or directory)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "tokenizer.json")
			write(t, p, content)
			f, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			mapped, err := Open(p) // read by View alone
			if err != nil {
				t.Fatal(err)
			}
			defer mapped.Close()
			buf := make([]byte, 8)
			if _, err := f.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := view(mapped, 0, 8); err != nil {
				t.Fatal(err)
			}
			tt.change(t, p)
			for i := range 2 { // the second read fails too
				n, err := f.ReadAt(buf, 0)
				if n != 0 || !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tt.how) {
					t.Fatalf("read %d after the change: %d, %v; want 0 and ErrChanged naming %s and %q", i, n, err, p, tt.how)
				}
			}
			if _, err := view(mapped, 0, 8); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), tt.how) {
				t.Fatalf("View after the change: %v; want ErrChanged naming %q", err, tt.how)
			}
			if fd, err := f.Reopen(); !errors.Is(err, ErrChanged) {
				syscall.Close(fd)
				t.Fatalf("Reopen after the change: %v", err)
			}
			if !f.FirstReport() || f.FirstReport() {
				t.Fatal("FirstReport is not true exactly once")
			}
		})
	}
}

// TestChangeStaysFound: putting the original back does not make a changed
// file readable again.
func TestChangeStaysFound(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a")
	write(t, p, content)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Rename(p, p+".moved"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 4), 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("after moving the file away: %v", err)
	}
	if err := os.Rename(p+".moved", p); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 4), 0); !errors.Is(err, ErrChanged) {
		t.Fatalf("after moving it back: %v", err)
	}
}

// TestOpenRefusesNonRegularFiles without blocking on a named pipe.
func TestOpenRefusesNonRegularFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir} {
		if _, err := Open(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Open(%s): %v", p, err)
		}
	}
}

// BenchmarkReadAt compares a checked read with a plain pread of the same
// page-cached file, at the request sizes FUSE sends.
func BenchmarkReadAt(b *testing.B) {
	p := filepath.Join(b.TempDir(), "shard")
	const size = 64 << 20
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, size), 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	plain, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer plain.Close()
	for _, n := range []int{4 << 10, 128 << 10, 1 << 20} {
		for _, r := range []struct {
			name string
			r    io.ReaderAt
		}{{"plain", plain}, {"checked", f}} {
			b.Run(fmt.Sprintf("%s/%dKiB", r.name, n>>10), func(b *testing.B) {
				buf := make([]byte, n)
				b.SetBytes(int64(n))
				off := int64(0)
				for b.Loop() {
					if _, err := r.r.ReadAt(buf, off); err != nil {
						b.Fatal(err)
					}
					off = (off + int64(n)) % size
				}
			})
		}
	}
}

// BenchmarkCheck is the cost a checked read adds: an fstat, and a stat of
// the path once an interval ("read"); and a check that always stats the
// path, as opening for passthrough does ("path").
func BenchmarkCheck(b *testing.B) {
	p := filepath.Join(b.TempDir(), "models--org--name", "snapshots", "0123abcd", "model-00001-of-00048.safetensors")
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, content, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, statPath := range []bool{false, true} {
		name := map[bool]string{false: "read", true: "path"}[statPath]
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if err := f.check(statPath); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPathChangesAreCaught changes what the path names while leaving the
// opened file untouched: the directory holding it is renamed and another
// put in its place. The first read after opening sees it; after a read,
// the next ones serve the opened file, unchanged, until the path is stat'd
// again, at most pathCheckInterval later.
func TestPathChangesAreCaught(t *testing.T) {
	replaceDir := func(t *testing.T, dir string) {
		if err := os.Rename(dir, dir+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, "shard"), bytes.ToUpper(content))
	}
	open := func(t *testing.T) (*File, string) {
		dir := filepath.Join(t.TempDir(), "snapshot")
		os.Mkdir(dir, 0o755)
		f, _ := writeOpen(t, dir, "shard", content)
		return f, dir
	}
	const how = "replaced by another file"
	t.Run("first read", func(t *testing.T) {
		f, dir := open(t)
		replaceDir(t, dir)
		if _, err := f.ReadAt(make([]byte, 4), 0); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), how) {
			t.Fatalf("first read after the change: %v; want ErrChanged, %q", err, how)
		}
	})
	t.Run("later read", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f, dir := open(t)
			buf := make([]byte, 4)
			if _, err := f.ReadAt(buf, 0); err != nil {
				t.Fatal(err)
			}
			replaceDir(t, dir)
			time.Sleep(pathCheckInterval - 1)
			if n, err := f.ReadAt(buf, 4); err != nil || !bytes.Equal(buf[:n], content[4:8]) {
				t.Fatalf("read within the interval: %q, %v; want the opened file's %q", buf[:n], err, content[4:8])
			}
			time.Sleep(1)
			if _, err := f.ReadAt(buf, 0); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), how) {
				t.Fatalf("read once the interval is over: %v; want ErrChanged, %q", err, how)
			}
		})
	})
}

// TestNoReadMixesVersions rewrites a file in place, same size, while
// readers read random ranges of it: every read that succeeds returns the
// old bytes only; the others fail with ErrChanged.
func TestNoReadMixesVersions(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	p := filepath.Join(t.TempDir(), "shard")
	const size = 4 << 20
	old := bytes.Repeat([]byte{0xA5}, size)
	write(t, p, old)
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	stop := make(chan struct{})
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			buf := make([]byte, 256<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				off := rng.Int64N(size - int64(len(buf)))
				n, err := f.ReadAt(buf, off)
				switch {
				case errors.Is(err, ErrChanged):
					failed.Add(1)
				case err != nil:
					t.Errorf("seed %d: read at %d: %v", seed, off, err)
					return
				case !bytes.Equal(buf[:n], old[:n]):
					t.Errorf("seed %d: read at %d returned bytes of the new version", seed, off)
					return
				default:
					ok.Add(1)
				}
			}
		}()
	}
	for ok.Load() < 100 && !t.Failed() { // the readers are under way
		runtime.Gosched()
	}
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{0x5A}, 64<<10)
	for off := int64(0); off < size; off += int64(len(chunk)) {
		if _, err := w.WriteAt(chunk, off); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	for failed.Load() == 0 && !t.Failed() { // every reader ends up failing
		runtime.Gosched()
	}
	close(stop)
	wg.Wait()
	t.Logf("%d reads of the old bytes, %d refused", ok.Load(), failed.Load())
}

// TestSpliceTo moves bytes of an unchanged file into a pipe, and refuses
// them, with ErrChanged, once the file has changed in any way a read sees.
func TestSpliceTo(t *testing.T) {
	big := bytes.Repeat(content, 4096) // 147 KiB: more than one page
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, p string)
	}{
		{"unchanged", func(*testing.T, string) {}},
		{"truncated", func(t *testing.T, p string) { os.Truncate(p, 10) }},
		{"rewritten in place", func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt([]byte("X"), 5)
			f.Close()
		}},
		{"replaced by rename", func(t *testing.T, p string) {
			write(t, p+".tmp", bytes.ToUpper(big))
			if err := os.Rename(p+".tmp", p); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "shard")
			write(t, p, big)
			f, err := Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var fds [2]int
			if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			defer syscall.Close(fds[0])
			defer syscall.Close(fds[1])
			if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, 256<<10); err != nil {
				t.Fatal(err)
			}
			tt.change(t, p)
			const off, n = 1000, 100 << 10
			m, err := f.SpliceTo(fds[1], off, n)
			if tt.name != "unchanged" {
				if m != 0 || !errors.Is(err, ErrChanged) {
					t.Fatalf("SpliceTo after the change: %d, %v; want 0, ErrChanged", m, err)
				}
				return
			}
			if m != n || err != nil {
				t.Fatalf("SpliceTo: %d, %v", m, err)
			}
			got := make([]byte, 0, n)
			for len(got) < n {
				k, err := syscall.Read(fds[0], got[len(got):n])
				if err != nil {
					t.Fatal(err)
				}
				got = got[:len(got)+k]
			}
			if !bytes.Equal(got, big[off:off+n]) {
				t.Fatal("the pipe holds other bytes")
			}
			if err := f.Check(); err != nil {
				t.Fatalf("Check of an unchanged file: %v", err)
			}
		})
	}
}
