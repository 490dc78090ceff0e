package views

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/gguf"
	"github.com/dsfs/dsfs/q2"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
)

// ggufOptions are gguf/'s flags. --gguf-split-mb is the most tensor data
// a split shard holds: by default 46 GiB, under Hugging Face's 50 GB file
// limit, as published GGUF shards are.
var ggufOptions = []Option{
	{Name: "gguf-split-mb", Usage: "most tensor data in one gguf/*/split/ shard, MiB", Default: strconv.Itoa(46 << 10), Kind: IntOption,
		Check: func(v string) error {
			if n, err := strconv.ParseInt(v, 10, 64); err != nil || n < 1 || n > 1<<30 {
				return fmt.Errorf("want a number of MiB from 1 to 1073741824, got %q", v)
			}
			return nil
		}},
}

// buildGGUF is the gguf/ view: a directory per recipe that applies to the
// checkpoint, each with the model as one GGUF file (for ollama, which
// cannot import split files) and as gguf-split shards under split/, and a
// README.md saying which recipes apply and why the others do not. The
// tensors' blocks are shared by both layouts (same block keys), so a
// block computed for one is served to the other from the cache; the
// experts of deepseek4's IQ2_XXS/ are q2/'s blocks, shared with q2/ alike.
func buildGGUF(s *Set, _ string) (Built, error) {
	files := make(map[string]*vfile.Node)
	var readme strings.Builder
	readme.WriteString("# gguf/\n\nGGUF files for llama.cpp and the tools built on it, computed lazily from the checkpoint.\n\n")
	v := s.option("gguf", "gguf-split-mb")
	if err := ggufOptions[0].Check(v); err != nil {
		return Built{}, fmt.Errorf("--gguf-split-mb: %w", err)
	}
	mb, _ := strconv.ParseInt(v, 10, 64)
	split := mb << 20
	if why := gguf.Unsupported(s.Cat.Config.Family); why != "" {
		return ggufUnsupported(readme.String(), why), nil
	}
	var shared *q2Shared
	for _, r := range gguf.Recipes() {
		m, err := r.Plan(s.Cat)
		if err != nil {
			fmt.Fprintf(&readme, "- `%s/`: not made for this checkpoint: %v\n", r.Name, err)
			continue
		}
		if shared == nil && usesQ2(m) {
			if shared, err = newQ2Shared(s); err != nil {
				fmt.Fprintf(&readme, "- `%s/`: not made for this checkpoint: %v\n", r.Name, err)
				continue
			}
		}
		fmt.Fprintf(&readme, "- `%s/`: %s\n", r.Name, r.About)
		if m.Note != "" {
			fmt.Fprintf(&readme, "  %s\n", m.Note)
		}
		blocks := ggufBlocks(s.Opt.DiskCache, r.Name, m)
		for _, layout := range []struct {
			dir   string
			split int64
		}{{"", 0}, {"split/", split}} {
			gfs, err := m.Files(layout.split)
			if err != nil {
				return Built{}, fmt.Errorf("recipe %s: %w", r.Name, err)
			}
			for _, gf := range gfs {
				f, err := ggufFile(blocks, shared, gf)
				if err != nil {
					return Built{}, fmt.Errorf("recipe %s: %s: %w", r.Name, gf.Name, err)
				}
				files[r.Name+"/"+layout.dir+gf.Name] = &vfile.Node{File: f}
			}
		}
	}
	files["README.md"] = &vfile.Node{File: vfile.NewFile(vfile.Bytes(readme.String()))}
	if len(files) == 1 {
		files["ERROR.txt"] = &vfile.Node{File: vfile.NewFile(vfile.Bytes("gguf/: no recipe applies to this checkpoint; README.md says why for each\n"))}
	}
	b := Built{Root: tree("", files)}
	if shared != nil {
		b.Stats = func() any { return ggufStats{Q2: shared.plan.Stats()} }
	}
	return b, nil
}

// ggufUnsupported is gguf/ for a model family llama.cpp cannot run (why
// says so): no GGUF file, a README.md saying what to use meanwhile, and
// ERROR.txt, the one line of a view that serves nothing.
func ggufUnsupported(head, why string) Built {
	readme := head + "No GGUF file is made for this checkpoint: " + why + `. A file in one of llama.cpp's other architectures would not load, or would run another model.

Meanwhile:

- ` + "`trace/`" + ` runs this checkpoint's decoder layers for real, on the CPU or a GPU, and serves each
  layer's routes and activations and the logits (` + "`dsfs export trace SRC OUT`" + ` writes them without a
  mount);
- ` + "`nvfp4/`" + ` serves it to vLLM and SGLang in the form of NVIDIA's NVFP4 builds (docs/LOADERS.md);
- ` + "`source/`" + ` is the checkpoint as released, for DeepSeek's own inference code and transformers.
`
	return Built{Root: tree("", map[string]*vfile.Node{
		"README.md": {File: vfile.NewFile(vfile.Bytes(readme))},
		"ERROR.txt": {File: vfile.NewFile(vfile.Bytes("gguf/: no GGUF file: " + why + "\n"))},
	})}
}

// ggufStats are gguf/'s counters in .dsfs/stats.json: the q2/ blocks its
// IQ2_XXS experts are served from, as counted by the q2 plan gguf/ holds
// (q2/'s own view counts its reads apart; both read the same blocks).
type ggufStats struct {
	Q2 q2.Stats `json:"q2_blocks"`
}

// q2Shared is the q2 engine's plan of the checkpoint, for the gguf
// recipes whose experts are q2/'s blocks: its quantised tensors by source
// name.
type q2Shared struct {
	plan   *q2.Plan
	blocks map[string]*vfile.Blocks
}

func newQ2Shared(s *Set) (*q2Shared, error) {
	q, err := q2.New(s.Cat, q2Options(s.Opt))
	if err != nil {
		return nil, fmt.Errorf("q2 plan: %w", err)
	}
	sh := &q2Shared{plan: q, blocks: make(map[string]*vfile.Blocks)}
	for _, t := range q.Quantised() {
		sh.blocks[t.Source.Name] = t.Blocks
	}
	return sh, nil
}

// usesQ2 reports whether any part of m is q2/'s blocks.
func usesQ2(m *gguf.Model) bool {
	for _, t := range m.Tensors {
		for _, p := range t.Parts {
			if p.Q2 {
				return true
			}
		}
	}
	return false
}

// ggufBlocks makes the blocks of whole rows of every part of m's tensors
// that is computed, not served from the source or from q2/, by tensor
// name and part index: once for the single file and the split shards,
// which serve the same blocks. Blocks of a costly type (IQ2_XXS, Q2_K)
// also go through disk, when there is one.
func ggufBlocks(disk *diskcache.Cache, recipe string, m *gguf.Model) map[string][]*vfile.Blocks {
	blocks := make(map[string][]*vfile.Blocks, len(m.Tensors))
	for i := range m.Tensors {
		t := &m.Tensors[i]
		bs := make([]*vfile.Blocks, len(t.Parts))
		for j := range t.Parts {
			p := &t.Parts[j]
			if p.Q2 || p.Decode == nil && p.Bytes == nil {
				continue
			}
			bs[j] = tensorfile.RowBlocks(fmt.Sprintf("gguf/%s/%s#%d", recipe, t.Name, j), p.Rows, t.RowBytes(), t.Compute(p, disk))
		}
		blocks[t.Name] = bs
	}
	return blocks
}

// zeros backs the padding after each tensor, which is shorter than the
// alignment the recipes write.
var zeros [gguf.DefaultAlignment]byte

// ggufFile turns a laid-out GGUF file into segments: the header, then each
// tensor's parts (source bytes served unchanged, q2/'s own blocks, or
// the blocks ggufBlocks made) and its zero padding.
func ggufFile(blocks map[string][]*vfile.Blocks, shared *q2Shared, gf gguf.File) (*vfile.File, error) {
	f := vfile.NewFile()
	for _, p := range gf.Layout.Header {
		f.Append(vfile.Bytes(p))
	}
	for i, t := range gf.Tensors {
		if f.Size() != gf.Layout.HeaderSize+gf.Layout.Offsets[i] {
			return nil, fmt.Errorf("tensor %s lands at %d, its info says %d", t.Name, f.Size()-gf.Layout.HeaderSize, gf.Layout.Offsets[i])
		}
		rb := t.RowBytes()
		var n int64
		for j, p := range t.Parts {
			switch {
			case p.Q2:
				// q2/'s own blocks: same IDs in the block cache, same
				// disk-cache keys, same counters.
				var b *vfile.Blocks
				if shared != nil {
					b = shared.blocks[p.Src.Name]
				}
				if b == nil || b.N != p.Rows*rb {
					return nil, fmt.Errorf("tensor %s: %s is not a q2/ tensor of %d rows of %d bytes", t.Name, p.Src.Name, p.Rows, rb)
				}
				f.Append(b)
			case p.Decode == nil && p.Bytes == nil:
				if p.Src.Size != p.Rows*rb {
					return nil, fmt.Errorf("tensor %s: source %s is %d bytes, %d rows of %d needed", t.Name, p.Src.Name, p.Src.Size, p.Rows, rb)
				}
				f.Append(vfile.Range{R: p.Src, Off: 0, N: p.Src.Size})
			default:
				bs := blocks[t.Name]
				if len(bs) != len(t.Parts) || bs[j] == nil || bs[j].N != p.Rows*rb {
					return nil, fmt.Errorf("tensor %s: part %d has no blocks of %d rows of %d bytes", t.Name, j, p.Rows, rb)
				}
				f.Append(bs[j])
			}
			n += p.Rows * rb
		}
		if n != t.Bytes() {
			return nil, fmt.Errorf("tensor %s: parts hold %d bytes, %s %v needs %d", t.Name, n, t.Type.Name, t.Ne, t.Bytes())
		}
		if pad := gf.Layout.Pad(n); pad <= int64(len(zeros)) {
			f.Append(vfile.Bytes(zeros[:pad]))
		} else {
			f.Append(vfile.Bytes(make([]byte, pad)))
		}
	}
	if f.Size() != gf.Layout.Size {
		return nil, fmt.Errorf("file is %d bytes, its layout %d", f.Size(), gf.Layout.Size)
	}
	return f, nil
}
