package integration

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/safetensors"
	"golang.org/x/sys/unix"
)

// replyStats is the part of .dsfs/stats.json about how reads were answered.
type replyStats struct {
	Reads          int64  `json:"reads"`
	Bytes          int64  `json:"bytes_served"`
	Passthrough    int64  `json:"passthrough"`
	PassthroughOff string `json:"passthrough_off"`
	Spliced        int64  `json:"reads_spliced"`
	Copied         int64  `json:"reads_copied"`
}

func (m *mount) replies(t *testing.T) replyStats {
	t.Helper()
	var s replyStats
	catJSON(t, m.path(".dsfs", "stats.json"), &s)
	return s
}

// cacheStats is the block cache's part of .dsfs/stats.json.
func (m *mount) cacheStats(t *testing.T) blockcache.Stats {
	t.Helper()
	var s struct {
		Cache blockcache.Stats `json:"cache"`
	}
	catJSON(t, m.path(".dsfs", "stats.json"), &s)
	return s.Cache
}

// spliceModes are the two ways a mount answers reads that carry a
// source's bytes: spliced from the file, and copied (--splice=false).
var spliceModes = []struct {
	name  string
	flags []string
}{
	{"spliced", nil},
	{"copied", []string{"--splice=false"}},
}

// directFile opens path with O_DIRECT, so that every read reaches dsfs as
// a request for exactly its bytes, never the page cache.
type directFile struct {
	fd  int
	buf []byte // page-aligned
}

func openDirect(t *testing.T, path string) *directFile {
	t.Helper()
	f, err := tryOpenDirect(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return f
}

// tryOpenDirect is openDirect for a goroutine other than the test's,
// which closes the file itself.
func tryOpenDirect(path string) (*directFile, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s O_DIRECT: %w", path, err)
	}
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &directFile{fd: fd, buf: buf}, nil
}

func (f *directFile) close() {
	unix.Close(f.fd)
	unix.Munmap(f.buf)
}

// readAt reads n bytes at off and returns a copy of them. A read a
// signal interrupted (the Go runtime preempts goroutines with one, and a
// FUSE read ends with EINTR then) is made again, as cat makes it.
func (f *directFile) readAt(off int64, n int) ([]byte, error) {
	got := 0
	for got < n {
		m, err := unix.Pread(f.fd, f.buf[got:n], off+int64(got))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if m == 0 {
			break
		}
		got += m
	}
	return bytes.Clone(f.buf[:got]), nil
}

// TestReadsSpanningSourceAndComputedBytes reads an nvfp4/ shard in reads
// that each cross expert weights (the source's bytes, spliced from the
// shard) and their weight_scale (computed), cut at random offsets, through
// a mount that splices and one that copies: both give the export's bytes,
// and the first spliced them.
func TestReadsSpanningSourceAndComputedBytes(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(export(t, "nvfp4", tinySrc), goodShard))
	if err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	for _, tc := range spliceModes {
		t.Run(tc.name, func(t *testing.T) {
			m := startMount(t, tinySrc, append([]string{"--views", "nvfp4"}, tc.flags...)...)
			f := openDirect(t, m.path("nvfp4", goodShard))
			rng := rand.New(rand.NewPCG(seed, 0))
			before := m.replies(t)
			for range 200 {
				off := rng.Int64N(int64(len(want)))
				n := 1 + rng.IntN(256<<10)
				got, err := f.readAt(off, n)
				if err != nil {
					t.Fatalf("seed %d: read %d bytes at %d: %v", seed, n, off, err)
				}
				if end := min(off+int64(n), int64(len(want))); !bytes.Equal(got, want[off:end]) {
					t.Fatalf("seed %d: %d bytes at %d differ from the export's", seed, n, off)
				}
			}
			s := m.replies(t)
			spliced := s.Spliced - before.Spliced
			switch {
			case tc.flags == nil && spliced == 0:
				t.Errorf("no read was spliced: %+v", s)
			case tc.flags != nil && spliced != 0:
				t.Errorf("%d reads were spliced with --splice=false", spliced)
			}
		})
	}
}

// TestReadsAcrossTensorBoundaries reads, through a mount that splices and
// one that copies, 64 KiB across every boundary in an nvfp4/ shard between a
// tensor whose bytes are the source's (an expert weight, served from the
// source shard) and one dsfs computes (its weight_scale, or a transcoded
// tensor): each read gives the export's bytes and is answered as one reply
// mixing the two kinds of piece, spliced or copied as the mount says.
func TestReadsAcrossTensorBoundaries(t *testing.T) {
	exported := filepath.Join(export(t, "nvfp4", tinySrc), goodShard)
	want, err := os.ReadFile(exported)
	if err != nil {
		t.Fatal(err)
	}
	h, err := safetensors.ReadHeader(bytes.NewReader(want), int64(len(want)))
	if err != nil {
		t.Fatalf("%s: %v", exported, err)
	}
	source := readSafetensors(t, filepath.Join(tinySrc, goodShard))
	verbatim := func(ts safetensors.Tensor) bool {
		s, ok := source[ts.Name]
		return ok && bytes.Equal(s.data, want[h.DataStart+ts.Begin:h.DataStart+ts.End])
	}
	tensors := slices.SortedFunc(slices.Values(h.Tensors), func(a, b safetensors.Tensor) int { return cmp.Compare(a.Begin, b.Begin) })
	// Each read takes span/2 bytes of the verbatim tensor, enough for dsfs
	// to leave them in the source file rather than copy them (vfile's
	// minLocal, 16 KiB).
	const span = 64 << 10
	var boundaries []int64 // offsets in the file where the two kinds meet
	for i := 1; i < len(tensors); i++ {
		a, b := tensors[i-1], tensors[i]
		v := a
		if verbatim(b) {
			v = b
		}
		if a.End == b.Begin && a.End > a.Begin && b.End > b.Begin && verbatim(a) != verbatim(b) && v.End-v.Begin >= span/2 {
			boundaries = append(boundaries, h.DataStart+b.Begin)
		}
	}
	if len(boundaries) == 0 {
		t.Fatalf("%s: no verbatim tensor of %d bytes or more borders a computed one", exported, span/2)
	}
	for _, tc := range []struct {
		name   string
		flags  []string
		splice bool
	}{
		{"spliced", nil, true},
		{"copied", []string{"--splice=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMount(t, tinySrc, append([]string{"--views", "nvfp4"}, tc.flags...)...)
			f := openDirect(t, m.path("nvfp4", goodShard))
			before := m.replies(t)
			for _, b := range boundaries {
				off := max(0, b-span/2)
				got, err := f.readAt(off, span)
				if err != nil {
					t.Fatalf("read of %d bytes at %d: %v", span, off, err)
				}
				if end := min(off+span, int64(len(want))); !bytes.Equal(got, want[off:end]) {
					t.Fatalf("%d bytes at %d, across the tensor border at %d, differ from the export's", span, off, b)
				}
			}
			s := m.replies(t)
			spliced, copied := s.Spliced-before.Spliced, s.Copied-before.Copied
			n := int64(len(boundaries))
			if tc.splice && (spliced < n || copied != 0) || !tc.splice && (spliced != 0 || copied < n) {
				t.Errorf("%d reads across borders: %d spliced, %d copied", n, spliced, copied)
			}
		})
	}
}

// TestHeldFileFailsOnceItsSourceIsReplaced: a reader holds nvfp4/'s and
// source/'s copies of a shard open (source/ not passed through, so both are
// served by dsfs, spliced from the descriptor dsfs opened at mount) while
// the shard is changed: rewritten in place, copied over (the same inode,
// truncated and written anew) and renamed over. Every later read of the held
// files fails with EIO, never returning bytes of the new file as the old.
func TestHeldFileFailsOnceItsSourceIsReplaced(t *testing.T) {
	changes := []struct {
		name string
		do   func(t *testing.T, p string)
	}{
		{"rewritten in place", func(t *testing.T, p string) { flipByte(t, p) }},
		{"copied over", func(t *testing.T, p string) {
			run(t, "cp", p, p+".new")
			flipByte(t, p+".new")
			run(t, "cp", p+".new", p)
		}},
		{"renamed over", func(t *testing.T, p string) {
			run(t, "cp", "-p", p, p+".new")
			flipByte(t, p+".new")
			run(t, "mv", p+".new", p)
		}},
	}
	for _, change := range changes {
		t.Run(change.name, func(t *testing.T) {
			src := copyTiny(t)
			p := filepath.Join(src, goodShard)
			old, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m := startMount(t, src, "--views", "source,nvfp4", "--passthrough=false")
			held := map[string]*directFile{
				"source": openDirect(t, m.path("source", goodShard)),
				"nvfp4":  openDirect(t, m.path("nvfp4", goodShard)),
			}
			half := int64(len(old) / 2)
			for view, f := range held {
				got, err := f.readAt(0, 256<<10)
				if err != nil {
					t.Fatalf("%s: read before the change: %v", view, err)
				}
				if view == "source" && !bytes.Equal(got, old[:256<<10]) {
					t.Fatalf("source: read before the change differs from the shard")
				}
			}
			if s := m.replies(t); s.Spliced == 0 {
				t.Fatalf("no read was spliced: %+v", s)
			}
			change.do(t, p)
			for view, f := range held {
				for _, off := range []int64{0, half - 4096, half} {
					got, err := f.readAt(off, 128<<10)
					if !errors.Is(err, syscall.EIO) {
						t.Errorf("%s: read of %d bytes at %d after the change: %v; want EIO", view, len(got), off, err)
					}
				}
			}
		})
	}
}

// TestPassthroughOnAndOff reads a source/ file through a mount that passes
// source files through to the kernel (as root, on a kernel that offers it)
// and through one started with --passthrough=false: the same bytes; the
// first serves none of them itself, the second serves them all, spliced,
// and says in stats.json why it does not pass files through.
func TestPassthroughOnAndOff(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(tinySrc, goodShard))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("off", func(t *testing.T) {
		m := startMount(t, tinySrc, "--views", "source", "--passthrough=false")
		if got, err := os.ReadFile(m.path("source", goodShard)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("source/%s: %v, or its bytes differ from the shard's", goodShard, err)
		}
		s := m.replies(t)
		if s.Passthrough != 0 || s.Bytes < int64(len(want)) || s.Spliced == 0 || s.PassthroughOff != "turned off (--passthrough=false)" {
			t.Errorf("stats.json: %+v; want no passthrough, the file's bytes served and spliced, and why", s)
		}
	})
	// Where the kernel or the privileges do not allow passthrough, the
	// mount falls back to serving the file itself and says why.
	t.Run("on", func(t *testing.T) {
		m := startMount(t, tinySrc, "--views", "source")
		if got, err := os.ReadFile(m.path("source", goodShard)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("source/%s: %v, or its bytes differ from the shard's", goodShard, err)
		}
		s := m.replies(t)
		switch {
		case s.PassthroughOff == "":
			if s.Passthrough == 0 || s.Bytes != 0 {
				t.Errorf("stats.json: %+v; want the file passed through, no byte served by dsfs", s)
			}
		case strings.Contains(s.PassthroughOff, "--passthrough=false"):
			t.Errorf("stats.json: passthrough_off %q without --passthrough=false", s.PassthroughOff)
		default:
			t.Logf("passthrough falls back here: %s", s.PassthroughOff)
			if s.Passthrough != 0 || s.Bytes < int64(len(want)) {
				t.Errorf("stats.json: %+v; want no passthrough and the file's bytes served by dsfs", s)
			}
		}
	})
}

// TestSequentialReadersReuseBlocks has six readers at once read every
// shard of one of the three transcoding views, each from start to end, in
// reads of random lengths that each reach dsfs (O_DIRECT), through a small
// cache, spliced and copied: the blocks they had whole are consumed and
// their memory computed into again while other readers' replies (two
// views share the Engram tables' blocks) may still hold them, and every
// byte is the export's.
func TestSequentialReadersReuseBlocks(t *testing.T) {
	views := []string{"nvfp4", "engram-fp4", "nvfp4+engram-fp4"}
	want := map[string][]byte{}
	paths := map[string][]string{} // per view
	for _, v := range views {
		out := export(t, v, tinySrc)
		for _, f := range files(t, out) {
			if strings.HasSuffix(f, ".safetensors") {
				b, err := os.ReadFile(filepath.Join(out, f))
				if err != nil {
					t.Fatal(err)
				}
				want[filepath.Join(v, f)] = b
				paths[v] = append(paths[v], filepath.Join(v, f))
			}
		}
	}
	seed := uint64(time.Now().UnixNano())
	for _, tc := range spliceModes {
		t.Run(tc.name, func(t *testing.T) {
			m := startMount(t, tinySrc, append([]string{"--cache-mb", "4", "--views", strings.Join(views, ",")}, tc.flags...)...)
			errc := make(chan error, 6)
			for r := range 6 {
				go func() {
					rng := rand.New(rand.NewPCG(seed, uint64(r)))
					ps := paths[views[r%len(views)]]
					first := rng.IntN(len(ps))
					for i := range ps {
						p := ps[(first+i)%len(ps)]
						if err := readThrough(m.path(p), want[p], rng); err != nil {
							errc <- fmt.Errorf("seed %d: %w", seed, err)
							return
						}
					}
					errc <- nil
				}()
			}
			for range 6 {
				if err := <-errc; err != nil {
					t.Fatal(err)
				}
			}
			reused := m.cacheStats(t).Reused
			if reused == 0 {
				t.Fatal("no block was computed into a reused buffer")
			}
			t.Logf("%d blocks computed into reused buffers", reused)
		})
	}
}

// readThrough reads path from start to end with O_DIRECT, in reads of
// random lengths up to 1 MiB, and checks them against want.
func readThrough(path string, want []byte, rng *rand.Rand) error {
	f, err := tryOpenDirect(path)
	if err != nil {
		return err
	}
	defer f.close()
	for off := int64(0); off < int64(len(want)); {
		n := 1 + rng.IntN(1<<20)
		got, err := f.readAt(off, n)
		if err != nil {
			return fmt.Errorf("%s: read %d bytes at %d: %w", path, n, off, err)
		}
		if end := min(off+int64(n), int64(len(want))); !bytes.Equal(got, want[off:end]) {
			return fmt.Errorf("%s: %d bytes at %d differ from the export's", path, n, off)
		}
		if len(got) == 0 {
			return fmt.Errorf("%s: ends at %d, want %d bytes", path, off, len(want))
		}
		off += int64(len(got))
	}
	return nil
}
