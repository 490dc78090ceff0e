package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/check"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfs"
)

// TestViewsMatchExport compares every file of every derived view, read
// through the mount by cmp, with `dsfs export` of the same view.
func TestViewsMatchExport(t *testing.T) {
	m := startMount(t, tinySrc)
	for _, view := range []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4", "source"} {
		t.Run(view, func(t *testing.T) {
			out := export(t, view, tinySrc)
			want := files(t, out)
			got := files(t, m.path(view))
			sort.Strings(want)
			sort.Strings(got)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("mounted files %v, exported %v", got, want)
			}
			for _, f := range want {
				run(t, "cmp", m.path(view, f), filepath.Join(out, f))
			}
		})
	}
	// A source file is served unchanged.
	run(t, "cmp", m.path("source", "config.json"), filepath.Join(tinySrc, "config.json"))
}

// TestNVFP4Decode decodes every expert from the mounted nvfp4/ view and the
// source and requires them equal bit for bit except in the blocks the
// view's report counts as lossy, on a checkpoint with planted outliers that
// force lossy blocks.
func TestNVFP4Decode(t *testing.T) {
	needMount(t)
	src := t.TempDir()
	if err := synth.Write("v41-tiny", src); err != nil {
		t.Fatal(err)
	}
	// An expert whose scales span more than E4M3's 18 octaves: an outlier
	// block 2^30 above the rest holding nonzero codes cannot be kept exact.
	const name = "layers.2.ffn.experts.3.w2"
	if err := synth.PatchTensor(src, name+".scale", func(b []byte) { b[0], b[1] = 127+30, 127+30 }); err != nil {
		t.Fatal(err)
	}
	if err := synth.PatchTensor(src, name+".weight", func(b []byte) {
		for i := range 32 {
			b[i] = 0x77 // codes 7: magnitude 6
		}
	}); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, src)
	r, err := check.NVFP4(m.path("source"), m.path("nvfp4"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d experts, %d blocks, %d differ, %d lossy", r.Experts, r.Blocks, r.Differ, r.Lossy)
	if r.Experts == 0 || r.Lossy < 2 || r.Differ != r.Lossy {
		t.Fatalf("decode check %+v: want the two planted blocks lossy and only they differ", r)
	}
}

// TestMmapFromAnotherProcess maps a view shard in a child process and
// hashes it, as safetensors' safe_open does.
func TestMmapFromAnotherProcess(t *testing.T) {
	m := startMount(t, tinySrc)
	out := export(t, "nvfp4+engram-fp4", tinySrc)
	for _, f := range files(t, out) {
		if !strings.HasSuffix(f, ".safetensors") {
			continue
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "DSFS_MMAP_SHA256="+m.path("nvfp4+engram-fp4", f))
		got, err := cmd.Output()
		if err != nil {
			t.Fatalf("mmap child on %s: %v", f, err)
		}
		want := strings.Fields(run(t, "sha256sum", filepath.Join(out, f)))[0]
		if strings.TrimSpace(string(got)) != want {
			t.Fatalf("%s: mmap sha256 %s, export %s", f, got, want)
		}
	}
}

// TestConcurrentRandomReads has 8 readers at random offsets and lengths
// across the derived shards, all checked against the exported bytes.
func TestConcurrentRandomReads(t *testing.T) {
	m := startMount(t, tinySrc, "--cache-mb", "4")
	out := export(t, "nvfp4+engram-fp4", tinySrc)
	var shards []string
	for _, f := range files(t, out) {
		if strings.HasSuffix(f, ".safetensors") {
			shards = append(shards, f)
		}
	}
	want := make(map[string][]byte)
	for _, f := range shards {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		want[f] = b
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	var wg sync.WaitGroup
	for r := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(r)))
			for range 200 {
				f := shards[rng.IntN(len(shards))]
				fh, err := os.Open(m.path("nvfp4+engram-fp4", f))
				if err != nil {
					t.Error(err)
					return
				}
				w := want[f]
				off := rng.Int64N(int64(len(w)))
				p := make([]byte, 1+rng.IntN(3<<20))
				n, err := fh.ReadAt(p, off)
				fh.Close()
				if err != nil && err != io.EOF {
					t.Errorf("seed %d: %s at %d: %v", seed, f, off, err)
					return
				}
				if !bytes.Equal(p[:n], w[off:min(int64(len(w)), off+int64(len(p)))]) {
					t.Errorf("seed %d: %s: %d bytes at %d differ from the export", seed, f, len(p), off)
					return
				}
			}
		}()
	}
	wg.Wait()
	var stats struct {
		Cache struct {
			Computed int64 `json:"blocks_computed"`
		} `json:"cache"`
		Errors int64 `json:"read_errors"`
	}
	b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
	if err != nil || json.Unmarshal(b, &stats) != nil {
		t.Fatalf("stats.json: %v %s", err, b)
	}
	if stats.Cache.Computed == 0 || stats.Errors != 0 {
		t.Fatalf("stats %s", b)
	}
}

// TestSHA256SumThroughMount hashes every view file with sha256sum run
// against the mount and against the export.
func TestSHA256SumThroughMount(t *testing.T) {
	m := startMount(t, tinySrc)
	out := export(t, "engram-fp4", tinySrc)
	for _, f := range files(t, out) {
		got := strings.Fields(run(t, "sha256sum", m.path("engram-fp4", f)))[0]
		b, _ := os.ReadFile(filepath.Join(out, f))
		sum := sha256.Sum256(b)
		if got != hex.EncodeToString(sum[:]) {
			t.Fatalf("%s: sha256 through the mount differs", f)
		}
	}
}

// TestKernelSettings checks what the mount asks of the kernel: source files
// read through kernel passthrough (as root), derived files in requests of
// vfs.MaxRequest bytes once read_ahead_kb is raised, and a second read served by the
// page cache without reaching dsfs.
//
// Both read checks are made so that memory pressure from elsewhere on the
// machine cannot fail them. The kernel evicts read-ahead pages the reader
// has not reached yet and reads them again in whatever pieces are missing,
// so the mean request size of a read depends on the machine's load: the
// request size is judged by the largest request instead. And the second
// read is made with the file's pages locked in memory, so that only the
// open dropping the page cache can make it reach dsfs.
func TestKernelSettings(t *testing.T) {
	m := startMount(t, tinySrc)
	type stats struct {
		Reads       int64 `json:"reads"`
		Bytes       int64 `json:"bytes_served"`
		Passthrough int64 `json:"passthrough"`
		LargestRead int64 `json:"largest_read"`
	}
	read := func() stats {
		var s stats
		b, err := os.ReadFile(m.path(".dsfs", "stats.json"))
		if err != nil || json.Unmarshal(b, &s) != nil {
			t.Fatalf("stats.json: %v %s", err, b)
		}
		return s
	}
	run(t, "cat", m.path("source", goodShard))
	if s := read(); s.Passthrough == 0 || s.Bytes != 0 {
		t.Errorf("source read: %+v, want kernel passthrough and no bytes through dsfs", s)
	}
	path := m.path("nvfp4", goodShard)
	before := read()
	run(t, "sh", "-c", "cat "+path+" > /dev/null")
	first := read()
	reads, n := first.Reads-before.Reads, first.Bytes-before.Bytes
	if fi, err := os.Stat(path); err != nil || fi.Size() < 2<<20 {
		t.Fatalf("%s: %v, %v: want a file of a few MiB to see 1 MiB requests", path, fi, err)
	}
	// Requests are as large as a spliced reply can be (vfs.MaxRequest: 1 MiB
	// where fs.pipe-max-size allows it, else 960 KiB); the kernel's
	// read-ahead windows may start a page or so off a request's bounds.
	if want := int64(vfs.MaxRequest()); n == 0 || first.LargestRead < want-8<<10 || first.LargestRead > want {
		t.Errorf("first read: %d bytes in %d requests, the largest served %d bytes; want requests of %d bytes", n, reads, first.LargestRead, want)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pages, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(pages)
	// Locking faults in what was evicted since the first read (served
	// again, before the figures the check compares are taken).
	if err := syscall.Mlock(pages); err != nil {
		t.Fatal(err)
	}
	locked := read()
	run(t, "sh", "-c", "cat "+path+" > /dev/null")
	if second := read(); second.Bytes != locked.Bytes {
		t.Errorf("second read reached dsfs: %d more bytes served", second.Bytes-locked.Bytes)
	}
}
