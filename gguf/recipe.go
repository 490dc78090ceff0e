package gguf

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"

	"github.com/dsfs/dsfs/checkpoint"
)

// Part is a run of consecutive rows of a tensor and how to get them: the
// bytes of Src unchanged when Decode is nil, else Decode's float32 values
// encoded as the tensor's type.
type Part struct {
	Rows int64
	Src  *checkpoint.Tensor
	// Decode returns rows [lo, hi) of the part (relative to it) as float32,
	// Ne[0] values a row.
	Decode func(lo, hi int64) ([]float32, error)
	// Bytes, when set instead of Decode, writes rows [lo, hi) of the
	// part straight into dst as the tensor's type: a byte shuffle (the
	// MXFP4 repack), with no float32 in between.
	Bytes func(lo, hi int64, dst []byte) error
	// Q2 marks rows that are q2/'s quantised tensor of Src, byte for byte
	// (Src an MXFP4 routed expert q2.Quantisable accepts, the tensor's type
	// q2.ExpertType's): a view serves them from q2/'s own blocks, under
	// q2/'s block IDs and disk-cache keys, so gguf/ and q2/ compute each
	// block once. Bytes computes the same rows through no cache.
	Q2 bool
}

// Tensor is one tensor of a recipe's model: its info and its parts, whose
// rows add up to the tensor's rows.
type Tensor struct {
	TensorInfo
	Parts []Part
}

// Fill writes rows [lo, hi) of part p, which has no Src bytes to serve,
// into dst.
func (t *Tensor) Fill(ctx context.Context, p Part, lo, hi int64, dst []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if p.Bytes != nil {
		return p.Bytes(lo, hi, dst)
	}
	v, err := p.Decode(lo, hi)
	if err != nil {
		return err
	}
	if int64(len(v)) != (hi-lo)*t.Ne[0] {
		return fmt.Errorf("gguf: tensor %s: %d values for rows %d-%d of %d", t.Name, len(v), lo, hi, t.Ne[0])
	}
	return Encode(dst, v, t.Type)
}

// Model is what a recipe makes of a checkpoint: the metadata and the
// tensors of one GGUF model, before it is laid out as one file or split.
type Model struct {
	Name    string // the files' base name
	KVs     []KV
	Tensors []Tensor
	// Note is what a reader of gguf/README.md should know of these files
	// beyond the recipe's About, in sentences, such as a recipe that
	// quantises nothing here; "" when nothing.
	Note string
}

// Recipe turns a checkpoint into a GGUF model.
type Recipe struct {
	// Name is the recipe's directory under gguf/.
	Name string
	// About is one line for the README.
	About string
	// Plan lays out the model from the catalog's headers, config.json and
	// the tokenizer files, reading no tensor values. It returns an error
	// when the recipe does not apply to the checkpoint.
	Plan func(cat *checkpoint.Catalog) (*Model, error)
}

// Unsupported says why llama.cpp runs no checkpoint of family f, whatever
// the recipe, or "" when one of its architectures may: llama.cpp has
// deepseek2 (V2, V3, R1) and deepseek4 (V4), and no DeepSeek-V4.1.
func Unsupported(f checkpoint.Family) string {
	if f == checkpoint.DeepSeekV41 {
		return "llama.cpp has no deepseek41 architecture yet (DeepSeek-V4.1's Engram memory, CSA2 attention roles and DSpark stages have no llama.cpp graph; upstream pull request ggml-org/llama.cpp#28696 would add one)"
	}
	return ""
}

// Recipes lists the recipes in the order gguf/ shows them. The recipes of
// one list read a checkpoint's tokenizer files once between them.
func Recipes() []Recipe {
	tok := &tokenizers{}
	return []Recipe{
		{"BF16", "deepseek2 (V2, V2-Lite, V3, R1): every matrix BF16 (FP8 dequantised, rounded to nearest even), norms, router and bias F32", planDeepseek2(BF16, tok)},
		{"Q8_0", "deepseek2: every matrix ggml Q8_0 (bit-exact with ggml's reference quantiser), norms, router and bias F32", planDeepseek2(Q8_0, tok)},
		{"IQ2_XXS", "deepseek2 and deepseek4: routed experts ggml IQ2_XXS (gate, up) and Q2_K (down) as q2/ quantises them (deepseek4: q2/'s own blocks, computed once for both views), everything else as BF16/ (deepseek2) or MXFP4/ (deepseek4)", planIQ2XXS(tok)},
		{"MXFP4", "deepseek4 (V4, V4-Flash): routed experts ggml MXFP4 (the converter's lossless repack), FP8 matrices Q8_0, BF16 and F32 as they are, tid2eid I32", planDeepseek4(MXFP4, tok)},
	}
}

// planIQ2XXS is the IQ2_XXS recipe of either family: deepseek4 for a
// DeepSeek-V4 config.json, else deepseek2.
func planIQ2XXS(tok *tokenizers) func(cat *checkpoint.Catalog) (*Model, error) {
	v2, v4 := planDeepseek2(IQ2_XXS, tok), planDeepseek4(IQ2_XXS, tok)
	return func(cat *checkpoint.Catalog) (*Model, error) {
		if cat.Config.Family == checkpoint.DeepSeekV4 {
			return v4(cat)
		}
		return v2(cat)
	}
}

// tokenizers keeps the tokenizer metadata of the checkpoint last read, so
// that the recipes of one list parse its tokenizer.json once: for a
// released vocabulary of 129k tokens that is most of a plan's time.
type tokenizers struct {
	mu    sync.Mutex
	cat   *checkpoint.Catalog
	pre   string
	vocab int
	kvs   []KV
	err   error
}

// get returns checkpointTokenizer(cat, pre, vocab), read once. The KVs
// are shared: callers copy them, never change them.
func (m *tokenizers) get(cat *checkpoint.Catalog, pre string, vocab int) ([]KV, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cat != cat || m.pre != pre || m.vocab != vocab {
		m.kvs, m.err = checkpointTokenizer(cat, pre, vocab)
		m.cat, m.pre, m.vocab = cat, pre, vocab
		// Every file of every recipe holds the arrays (megabytes): encode
		// them once, and each header keeps these bytes.
		for i := range m.kvs {
			if m.err != nil {
				break
			}
			switch v := m.kvs[i].Value.(type) {
			case []string, []int32, []uint32, []float32, []bool:
				if m.kvs[i].Value, m.err = encodeValue(v); m.err != nil {
					m.err = fmt.Errorf("%s: %w", m.kvs[i].Key, m.err)
				}
			}
		}
	}
	return m.kvs, m.err
}

// File is one GGUF file of a model: its layout and its tensors in data
// order.
type File struct {
	Name    string
	Layout  *Layout
	Tensors []Tensor
}

// Files lays out a model as one file NAME.gguf, or, when splitBytes > 0 and
// its data is larger, as gguf-split shards NAME-0000i-of-0000N.gguf of at
// most splitBytes of tensor data each.
func (m *Model) Files(splitBytes int64) ([]File, error) {
	infos := make([]TensorInfo, len(m.Tensors))
	byName := make(map[string]Tensor, len(m.Tensors))
	for i, t := range m.Tensors {
		infos[i] = t.TensorInfo
		byName[t.Name] = t
	}
	if splitBytes <= 0 {
		l, err := NewLayout(m.KVs, infos)
		if err != nil {
			return nil, err
		}
		return []File{{Name: m.Name + ".gguf", Layout: l, Tensors: m.Tensors}}, nil
	}
	groups := SplitGroups(infos, splitBytes)
	files := make([]File, len(groups))
	for i, g := range groups {
		align := KV{"general.alignment", uint32(DefaultAlignment)}
		kvs := SplitKVs(m.KVs, i, len(groups), len(infos))
		if i > 0 {
			kvs = append([]KV{align}, kvs...)
		}
		l, err := NewLayout(kvs, g)
		if err != nil {
			return nil, err
		}
		ts := make([]Tensor, len(g))
		for j, ti := range g {
			ts[j] = byName[ti.Name]
		}
		files[i] = File{Name: SplitName(m.Name, i, len(groups)), Layout: l, Tensors: ts}
	}
	return files, nil
}

// modelName is the base name of a checkpoint's files: its directory's
// name, or for a Hugging Face cache snapshot the repository's name.
func modelName(dir string) string {
	snap, parent := filepath.Base(dir), filepath.Dir(dir)
	if filepath.Base(parent) == "snapshots" {
		repo := filepath.Base(filepath.Dir(parent))
		if i := strings.LastIndex(repo, "--"); i >= 0 {
			return repo[i+2:]
		}
	}
	return snap
}

// generalKVs are the general.* keys every recipe writes first, as the
// converter does: architecture, name, page alignment, file type and the
// quantisation version.
func generalKVs(arch, dir string, ftype uint32) []KV {
	return []KV{
		{"general.architecture", arch},
		{"general.type", "model"},
		{"general.name", modelName(dir)},
		{"general.alignment", uint32(DefaultAlignment)},
		{"general.file_type", ftype},
		{"general.quantization_version", uint32(QuantizationVersion)},
	}
}
