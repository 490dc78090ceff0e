package synth

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"

	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tokenizer"
)

// IndexName is the name of the shard index a checkpoint carries.
const IndexName = "model.safetensors.index.json"

// InferenceConfigName is the folder of DeepSeek's inference/config.json.
const InferenceConfigName = "inference"

// chunkBytes is the weight bytes one generation job covers: large enough
// for few, large writes, small enough to spread a tensor over every core.
// Chunk boundaries depend on shapes only, and each chunk has its own seed,
// so the bytes do not depend on how many workers run.
const chunkBytes = 1 << 20

// A shard is one file of the checkpoint and the units it holds.
type shard struct {
	name   string
	units  []*unit
	layout *safetensors.Layout
}

// planShards cuts the units into shards: with maxBytes > 0 the way
// save_pretrained does (in order, closing a shard before a unit would take
// it past maxBytes), else by each unit's release shard. Headers are
// written as DeepSeek's releases are, by the reference serializer without
// __metadata__.
func planShards(l *layout, maxBytes int64) ([]*shard, error) {
	var shards []*shard
	if maxBytes > 0 {
		var cur *shard
		var size int64
		for i := range l.units {
			u := &l.units[i]
			n := u.bytes()
			if cur == nil || len(cur.units) > 0 && size+n > maxBytes {
				cur = new(shard)
				shards = append(shards, cur)
				size = 0
			}
			cur.units = append(cur.units, u)
			size += n
		}
	} else {
		byTag := make(map[int]*shard)
		var tags []int
		for i := range l.units {
			u := &l.units[i]
			sh := byTag[u.shard]
			if sh == nil {
				sh = new(shard)
				byTag[u.shard] = sh
				tags = append(tags, u.shard)
			}
			sh.units = append(sh.units, u)
		}
		slices.Sort(tags)
		for _, t := range tags {
			shards = append(shards, byTag[t])
		}
	}
	for i, sh := range shards {
		sh.name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		var specs []safetensors.Spec
		for _, u := range sh.units {
			specs = append(specs, u.tensors...)
		}
		lay, err := safetensors.NewLayout(nil, specs)
		if err != nil {
			return nil, fmt.Errorf("synth: %s: %w", sh.name, err)
		}
		sh.layout = lay
	}
	return shards, nil
}

// WriteSpec writes the checkpoint s describes into dir (created if
// missing): the shards model-NNNNN-of-MMMMM.safetensors, IndexName,
// config.json, inference/config.json, tokenizer.json and
// tokenizer_config.json, replacing files of those names and leaving
// others alone. The same spec always gives the same bytes.
func WriteSpec(s Spec, dir string) error {
	return writeSpec(s, dir, runtime.GOMAXPROCS(0))
}

func writeSpec(s Spec, dir string, workers int) error {
	if err := s.Validate(); err != nil {
		return err
	}
	shards, err := planShards(newLayout(&s), s.MaxShardBytes)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	files := make([]*os.File, len(shards))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close() // only on an error path: the success path closes and clears
			}
		}
	}()
	for i, sh := range shards {
		f, err := createShard(filepath.Join(dir, sh.name), sh.layout)
		if err != nil {
			return err
		}
		files[i] = f
	}
	if !s.Sparse {
		if err := generate(&s, shards, files, workers); err != nil {
			return err
		}
	}
	for i, f := range files {
		files[i] = nil
		if err := f.Close(); err != nil {
			return fmt.Errorf("synth: %w", err)
		}
	}
	if err := writeIndex(dir, shards); err != nil {
		return err
	}
	var cfg any = newV41Config(&s)
	inference := newV41Inference(&s)
	if s.Arch == ArchV4 {
		cfg, inference = newV4Config(&s), newV4Inference(&s)
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), cfg); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, InferenceConfigName), 0o755); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, InferenceConfigName, "config.json"), inference, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return writeTokenizer(&s, dir)
}

// tokenizerMerges is the most merges a Spec's tokenizer.json learns from
// tokenizer.Synthesize's sample (of the 1,112 it yields).
const tokenizerMerges = 1000

// writeTokenizer writes s's tokenizer.json (Vocab ids: the merges the
// sample teaches, up to tokenizerMerges, then TokenizerFill filler words
// and their spaced copies) and a tokenizer_config.json whose pad token is
// the tokenizer's id 2, as pad_token_id says. trace/ encodes its text
// prompts with it, and V4.1's Engram hashes its ids' normalised texts.
func writeTokenizer(s *Spec, dir string) error {
	merges := min(tokenizerMerges, s.Vocab-tokenizerBase-s.TokenizerFill)
	tok, err := tokenizer.SynthesizeVocab(s.Vocab, merges, s.TokenizerFill)
	if err != nil {
		return fmt.Errorf("synth: tokenizer.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer.json"), tok, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	cfg := maps.Clone(tokenizerConfig)
	cfg["pad_token"] = "<｜▁pad▁｜>"
	return writeJSON(filepath.Join(dir, "tokenizer_config.json"), cfg)
}

// createShard writes the header and sizes the file; the data reads as
// zeros until written.
func createShard(path string, l *safetensors.Layout) (*os.File, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("synth: %w", err)
	}
	if _, err := f.Write(l.Header); err != nil {
		f.Close()
		return nil, fmt.Errorf("synth: %w", err)
	}
	if err := f.Truncate(l.Size); err != nil {
		f.Close()
		return nil, fmt.Errorf("synth: %w", err)
	}
	return f, nil
}

// A job generates rows [r0, r1) of a unit's weight (and the matching scale
// rows) and writes them in place.
type job struct {
	f      *os.File
	u      *unit
	offs   []int64 // absolute file offset of each tensor's data
	r0, r1 int64
	chunk  uint64
}

// rows returns the number of rows of t (1 for a scalar) and the bytes of one.
func rows(t safetensors.Spec) (n, rowBytes int64) {
	b, _ := safetensors.ByteLen(t.DType, t.Shape) // validated by the layout
	if len(t.Shape) == 0 || t.Shape[0] == 0 {
		return 1, b
	}
	return t.Shape[0], b / t.Shape[0]
}

// jobs splits every unit of every shard into chunks.
func jobs(shards []*shard, files []*os.File) []job {
	var out []job
	for i, sh := range shards {
		begin := make(map[string]int64, len(sh.layout.Tensors))
		for _, t := range sh.layout.Tensors {
			begin[t.Name] = sh.layout.DataStart() + t.Begin
		}
		for _, u := range sh.units {
			offs := make([]int64, len(u.tensors))
			for k, t := range u.tensors {
				offs[k] = begin[t.Name]
			}
			n, rb := rows(u.tensors[0])
			gran := int64(1)
			if u.kind == kindFP8 {
				gran = int64(u.block) // whole scale rows
			}
			per := max(gran, chunkBytes/max(rb, 1)/gran*gran)
			for c, r0 := uint64(0), int64(0); r0 < n; c, r0 = c+1, r0+per {
				out = append(out, job{f: files[i], u: u, offs: offs, r0: r0, r1: min(n, r0+per), chunk: c})
			}
		}
	}
	return out
}

// splitmix64 is a 64-bit mixing function (SplitMix64's finaliser).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func nameSeed(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return splitmix64(seed ^ h.Sum64())
}

// newChunkRNG returns the PRNG of one chunk of the unit named name.
func newChunkRNG(seed uint64, name string, chunk uint64) *rand.PCG {
	s := nameSeed(seed, name)
	return rand.NewPCG(s, splitmix64(s+chunk))
}

// generate fills every shard's data with workers goroutines.
func generate(s *Spec, shards []*shard, files []*os.File, workers int) error {
	t := getTables()
	all := jobs(shards, files)
	next := make(chan *job)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range max(1, workers) {
		wg.Go(func() {
			var buf []byte
			for j := range next {
				var err error
				buf, err = run(s, t, j, buf)
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range all {
		mu.Lock()
		failed := first != nil
		mu.Unlock()
		if failed {
			break
		}
		next <- &all[i]
	}
	close(next)
	wg.Wait()
	return first
}

// run generates one job into buf (grown as needed) and writes it.
func run(s *Spec, t *tables, j *job, buf []byte) ([]byte, error) {
	u := j.u
	var lens [2]int64
	var starts [2]int64 // row offsets of the chunk in each tensor
	for k, ts := range u.tensors {
		_, rb := rows(ts)
		r0, r1 := j.r0, j.r1
		if u.kind == kindFP8 && k == 1 {
			b := int64(u.block)
			r0, r1 = r0/b, (r1+b-1)/b
		}
		starts[k] = r0 * rb
		lens[k] = (r1 - r0) * rb
	}
	total := lens[0] + lens[1]
	if int64(cap(buf)) < total {
		buf = make([]byte, total)
	}
	buf = buf[:total]
	w, sc := buf[:lens[0]], buf[lens[0]:]
	rng := newChunkRNG(s.Seed, u.tensors[0].Name, j.chunk)
	n := int(j.r1 - j.r0)
	switch u.kind {
	case kindMXFP4:
		centre := mxfp4Centre - 1 + int(nameSeed(s.Seed, u.group)%3)
		fillMXFP4(t, rng, centre, w, sc, n)
	case kindFP8:
		fillFP8(t, rng, w, sc)
	case kindEngram:
		fillEngram(t, rng, w, sc, n)
	case kindBF16:
		fillPairs(&t.bf16Weight, rng, w)
	case kindNormal:
		fillNormal(t, rng, w, u.tensors[0].DType == safetensors.F32, u.mean, u.sd)
	case kindHash:
		fillHash(rng, w, u.tensors[0].DType == safetensors.I64, int(u.sd), int(u.tensors[0].Shape[1]))
	}
	for k, ts := range u.tensors {
		part := w
		if k == 1 {
			part = sc
		}
		if _, err := j.f.WriteAt(part, j.offs[k]+starts[k]); err != nil {
			return buf, fmt.Errorf("synth: writing %s: %w", ts.Name, err)
		}
	}
	return buf, nil
}

// index is the layout of model.safetensors.index.json.
type index struct {
	Metadata  indexMeta         `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

type indexMeta struct {
	TotalSize int64 `json:"total_size"`
}

func writeIndex(dir string, shards []*shard) error {
	ix := index{WeightMap: make(map[string]string)}
	for _, sh := range shards {
		for _, t := range sh.layout.Tensors {
			ix.WeightMap[t.Name] = sh.name
			ix.Metadata.TotalSize += t.Len()
		}
	}
	// As the releases write it: json.dumps(indent=2), no final newline.
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %s: %w", IndexName, err)
	}
	if err := os.WriteFile(filepath.Join(dir, IndexName), b, 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// writeJSON writes v indented, as the Hugging Face tools do (map keys sorted).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("synth: %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	return nil
}

// Tensor is one tensor for WriteShard. Data holds its bytes; nil writes
// zeros (as a hole).
type Tensor struct {
	Name  string
	DType safetensors.DType
	Shape []int64
	Data  []byte
}

// WriteShard writes a safetensors file at path holding tensors, laid out as
// the reference serializer does (safetensors.NewLayout) with the given
// __metadata__. It is the tool for tests that need a hand-made shard (odd
// dtypes, planted NaN or Inf values): a Data whose length does not match
// its dtype and shape is an error, not a malformed file.
func WriteShard(path string, meta []safetensors.Meta, tensors []Tensor) error {
	specs := make([]safetensors.Spec, len(tensors))
	data := make(map[string][]byte, len(tensors))
	for i, t := range tensors {
		specs[i] = safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape}
		data[t.Name] = t.Data
	}
	l, err := safetensors.NewLayout(meta, specs)
	if err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	for _, t := range l.Tensors {
		if d := data[t.Name]; d != nil && int64(len(d)) != t.Len() {
			return fmt.Errorf("synth: %s: tensor %q: %d bytes of data for %s %v, which needs %d",
				path, t.Name, len(d), t.DType, t.Shape, t.Len())
		}
	}
	f, err := createShard(path, l)
	if err != nil {
		return err
	}
	for _, t := range l.Tensors {
		if d := data[t.Name]; d != nil {
			if _, err := f.WriteAt(d, l.DataStart()+t.Begin); err != nil {
				f.Close()
				return fmt.Errorf("synth: %s: tensor %q: %w", path, t.Name, err)
			}
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("synth: %s: %w", path, err)
	}
	return nil
}

// PatchTensor rewrites one tensor of the checkpoint in dir in place: edit
// gets the tensor's bytes and changes them (to plant a NaN scale, an Inf,
// a bad code). The shard keeps its size and header.
func PatchTensor(dir, name string, edit func(data []byte)) error {
	b, err := os.ReadFile(filepath.Join(dir, IndexName))
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	var ix index
	if err := json.Unmarshal(b, &ix); err != nil {
		return fmt.Errorf("synth: %s: %w", IndexName, err)
	}
	file, ok := ix.WeightMap[name]
	if !ok {
		return fmt.Errorf("synth: tensor %q is not in %s", name, IndexName)
	}
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("synth: %w", err)
	}
	err = patch(f, name, edit)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("synth: %s: tensor %q: %w", path, name, err)
	}
	return nil
}

func patch(f *os.File, name string, edit func([]byte)) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	h, err := safetensors.ReadHeader(f, st.Size())
	if err != nil {
		return err
	}
	t, ok := h.Find(name)
	if !ok {
		return errors.New("not in the shard's header")
	}
	data := make([]byte, t.Len())
	off := h.DataStart + t.Begin
	if _, err := f.ReadAt(data, off); err != nil {
		return err
	}
	edit(data)
	_, err = f.WriteAt(data, off)
	return err
}
