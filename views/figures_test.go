package views

import (
	"bytes"
	"image/png"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/blockcache"
	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/figures"
	"github.com/dsfs/dsfs/internal/ggufread"
	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/synth"
	"github.com/dsfs/dsfs/vfile"
)

// TestManifestBytes checks what manifest/bytes.png is drawn from, on the
// V4.1 and a V3 checkpoint (gguf/'s recipes apply to the second only):
// the source's bar is the overview's tensor bytes; each view's, those of
// every tensor manifest/views/VIEW.json describes; each gguf/ recipe's,
// the tensor data of its directory's single file; each bar's roles and
// dtypes add up to the same. The PNG decodes at its stat's size.
func TestManifestBytes(t *testing.T) {
	v3 := t.TempDir()
	if err := synth.Write("v3-tiny", v3); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, dir string }{{"v41-tiny", tinyDir}, {"v3-tiny", v3}} {
		dir := tc.dir
		t.Run(tc.name, func(t *testing.T) {
			cat, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer cat.Close()
			s, err := Build(cat, Options{Views: []string{"nvfp4", "manifest"}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			prov := &provenance{set: s, unserved: make(map[string]*Set)}
			defer prov.Close()
			described := s.described("manifest")
			fig, err := prov.bytesFigure(t.Context(), described)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{"source": inventory.NewOverview(cat).Bytes}
			for _, v := range described {
				d, err := prov.view(t.Context(), v)
				if err != nil {
					t.Fatal(err)
				}
				if v == "gguf" {
					for _, f := range d.Files {
						if dir, name, ok := strings.Cut(f.File, "/"); ok && !strings.Contains(name, "/") {
							want["gguf/"+dir] = ggufData(t, prov, f.File) // the single file, not split/'s
						}
					}
					continue
				}
				var n int64
				for _, f := range d.Files {
					for _, td := range f.Tensors {
						n += td.Bytes
					}
				}
				want[v] = n
			}
			got := make(map[string]int64)
			for _, bar := range fig.Bars {
				byRole, byDType := sum(bar.ByRole), sum(bar.ByDType)
				if byRole != byDType {
					t.Errorf("%s: %d bytes by role, %d by dtype", bar.Name, byRole, byDType)
				}
				got[bar.Name] = byRole
			}
			if !maps.Equal(got, want) {
				t.Errorf("bars %v, want %v", got, want)
			}
			if dir == v3 && !slices.ContainsFunc(fig.Bars, func(b figures.ByteBar) bool { return b.Name == "gguf/BF16" }) {
				t.Errorf("v3-tiny: no gguf/BF16 bar among %v", slices.Sorted(maps.Keys(got)))
			}
			n := s.Root.Child("manifest").Child("bytes.png")
			size, ok := n.Doc.Stat(t.Context())
			b, err := n.Doc.Bytes(t.Context())
			if err != nil || !ok || int64(len(b)) != size {
				t.Fatalf("bytes.png: %d bytes (%v), stat %d %v", len(b), err, size, ok)
			}
			if _, err := png.Decode(bytes.NewReader(b)); err != nil {
				t.Errorf("bytes.png: %v", err)
			}
			if out := os.Getenv("DSFS_TEST_FIGURES"); out != "" {
				os.WriteFile(filepath.Join(out, tc.name+"-bytes.png"), b, 0o644)
			}
		})
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// ggufData is the tensor data of the GGUF file at path in the gguf/
// tree, as its header gives it (read through the view, with no tensor
// computed).
func ggufData(t *testing.T, prov *provenance, path string) int64 {
	t.Helper()
	_, root, err := prov.tree("gguf")
	if err != nil {
		t.Fatal(err)
	}
	n, err := root.Lookup(path)
	if err != nil {
		t.Fatal(err)
	}
	cache := blockcache.New(64<<20, 2)
	defer cache.Close()
	f, err := ggufread.Read(vfile.NewReader(n.File, cache), n.File.Size())
	if err != nil {
		t.Fatalf("gguf/%s: %v", path, err)
	}
	var data int64
	for _, ti := range f.Tensors {
		data += ti.Size
	}
	return data
}
