package views

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"github.com/dsfs/dsfs/inventory"
	"github.com/dsfs/dsfs/vfile"
)

// manifestOptions are manifest/'s options. The CLI's check of --tp is the
// one inspect and diff share (the flag name's).
var manifestOptions = []Option{
	{Name: "tp", Usage: "tensor-parallel degree whose cuts manifest/ reports (1: none)", Default: strconv.Itoa(inventory.DefaultTP), Kind: IntOption},
	{Name: "no-hash", Usage: "manifest/ reads headers only: no sha256, no value checks", Default: "false", Kind: BoolOption},
}

// buildManifest is the manifest/ view: the inventory of every tensor.
// summary.json, README.md and bytes.png (the tensor bytes of the source
// and of each view described, by role and dtype) come from the headers;
// manifest.json and
// shards/NAME.json read the data they describe on first open (hashing and
// checking every byte once, with the results kept for the mount and, with
// a cache dir, across mounts; the set's stats show the progress);
// views/VIEW.json says where each tensor of the other views comes from,
// served beside it or not.
func buildManifest(s *Set, name string) (Built, error) {
	var opt inventory.Options
	var err error
	if opt.TP, err = s.intOption(name, "tp"); err != nil {
		return Built{}, err
	}
	if opt.NoHash, err = s.boolOption(name, "no-hash"); err != nil {
		return Built{}, err
	}
	if s.Opt.DiskCache != nil && s.Opt.DiskCache.Dir() != "" { // a shared cache without a directory keeps no digests
		c, err := inventory.OpenCache(ManifestCacheDir(s.Opt.DiskCache.Dir()))
		if err != nil {
			return Built{}, err
		}
		opt.Cache = c
	}
	inv := inventory.New(s.Cat, opt)
	files := map[string]*vfile.Node{
		"summary.json": {Doc: vfile.NewHeaderDoc(jsonText(func(context.Context) (any, error) { return s.overview(), nil }))},
		"README.md": {Doc: vfile.NewHeaderDoc(func(context.Context) ([]byte, error) {
			return s.overview().Markdown(), nil
		})},
		"manifest.json": manifestDoc(inv, opt.NoHash),
	}
	for _, sh := range s.Cat.Shards {
		n := manifestDoc(inv, opt.NoHash, sh.Name)
		n.From = s.shardSources(sh)
		files["shards/"+sh.Name+".json"] = n
	}
	prov := &provenance{set: s.top, unserved: make(map[string]*Set)}
	described := s.described(name)
	files["bytes.png"] = &vfile.Node{Doc: vfile.NewHeaderDoc(func(ctx context.Context) ([]byte, error) {
		return prov.bytesPNG(ctx, described)
	})}
	for _, v := range described {
		files["views/"+v+".json"] = &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
			d, err := prov.view(ctx, v)
			if err != nil {
				return nil, err
			}
			// Compact: a full checkpoint's view has ~100k tensors.
			b, err := json.Marshal(d)
			return append(b, '\n'), err
		})}
	}
	return Built{Root: tree("", files), Stats: func() any { return inv.Progress().Snapshot() },
		Closers: []io.Closer{prov}}, nil
}

// ManifestCacheDir is where manifest/ keeps its digests and checks inside
// a --cache-dir, beside the disk cache's entries (which live in two-digit
// hex directories only), so that `dsfs inspect --cache-dir` shares them.
func ManifestCacheDir(cacheDir string) string { return filepath.Join(cacheDir, "manifest") }

// manifestDoc is manifest.json, or a shard's document when shards are
// named. Without hashing (headersOnly) it follows from the headers, and is
// streamed: a full checkpoint's documents are tens of megabytes, which
// `ls -lR` should not leave behind. Every writing carries the time and
// duration of the first, so that all are the same bytes.
func manifestDoc(inv *inventory.Inventory, headersOnly bool, shards ...string) *vfile.Node {
	if !headersOnly {
		return &vfile.Node{Doc: vfile.NewDoc(func(ctx context.Context) ([]byte, error) {
			m, err := inv.Manifest(ctx, shards...)
			if err != nil {
				return nil, err
			}
			return m.JSON()
		})}
	}
	var (
		mu      sync.Mutex
		stamped bool
		utc     string
		seconds float64
	)
	return &vfile.Node{Doc: vfile.NewStreamedDoc(func(ctx context.Context, w io.Writer) error {
		m, err := inv.Manifest(ctx, shards...)
		if err != nil {
			return err
		}
		mu.Lock()
		if !stamped {
			stamped, utc, seconds = true, m.GeneratedUTC, m.Seconds
		}
		m.GeneratedUTC, m.Seconds = utc, seconds
		mu.Unlock()
		return m.WriteJSON(w)
	})}
}

// described lists the views manifest/views/ describes, in registry order:
// every view that serves a checkpoint (nvfp4/, engram-fp4/,
// nvfp4+engram-fp4/, q2/), served beside manifest/ or not, so that `dsfs
// export manifest` holds them too, and trace/ when it is served (building
// it starts its compute backend). source/ needs no description.
func (s *Set) described(self string) []string {
	var out []string
	for _, v := range s.registry {
		switch {
		case v.Name == self || v.Name == "source":
		case v.Name == "trace" && len(s.Opt.Views) > 0 && !slices.Contains(s.Opt.Views, v.Name):
		default:
			out = append(out, v.Name)
		}
	}
	return out
}
