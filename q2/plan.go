package q2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/codecs/iq2xxs"
	"github.com/dsfs/dsfs/codecs/q2k"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/tensorfile"
	"github.com/dsfs/dsfs/vfile"
	"golang.org/x/sync/errgroup"
)

// GGMLType is a ggml block format the q2/ view writes.
type GGMLType struct {
	Name          string  // ggml's name: IQ2_XXS, Q2_K
	BlockWeights  int     // weights per block
	BlockBytes    int     // bytes per block
	BitsPerWeight float64 // 8 * BlockBytes / BlockWeights
	// Importance is the recipe's importance vector: "unit" (a constant
	// vector of ones) or "none" (ggml's reference path).
	Importance string
	// Quantise encodes whole rows of float32 weights.
	Quantise func(dst []byte, src []float32)
	// Dequantise decodes blocks back to float32, as ggml's to_float does.
	Dequantise func(dst []float32, src []byte)
}

// The recipe of FORMATS.md "q2/": IQ2_XXS with a unit importance vector for
// the gate and up projections, Q2_K on ggml's reference path for down.
var (
	IQ2XXS = &GGMLType{Name: "IQ2_XXS", BlockWeights: iq2xxs.BlockWeights, BlockBytes: iq2xxs.BlockBytes,
		BitsPerWeight: 8.0 * iq2xxs.BlockBytes / iq2xxs.BlockWeights, Importance: "unit",
		Quantise:   func(dst []byte, src []float32) { iq2xxs.Quantize(dst, src, nil) },
		Dequantise: iq2xxs.Dequantize}
	Q2K = &GGMLType{Name: "Q2_K", BlockWeights: q2k.BlockWeights, BlockBytes: q2k.BlockBytes,
		BitsPerWeight: 8.0 * q2k.BlockBytes / q2k.BlockWeights, Importance: "none",
		Quantise: q2k.QuantizeRef, Dequantise: q2k.Dequantize}
)

// typeOf is the ggml type a routed expert projection becomes.
func typeOf(proj string) *GGMLType {
	if proj == "w2" {
		return Q2K
	}
	return IQ2XXS
}

// Quantiser is the provenance q2/ records for its blocks.
const Quantiser = "Go port of ggml's reference quantisers, bit-identical to ggml d99724f2 on the reference vectors"

// Roles of q2/ tensors beyond the catalog's own (which native tensors keep).
const (
	RoleQuantised = "quantised"
	RoleExternal  = "external"
	RoleDropped   = "dropped"
)

// chunkWeights is how many weights one worker quantises at a time: a
// few rows, so a block of about a thousand rows spreads over every core.
const chunkWeights = 64 << 10

// slots bounds q2/'s nested parallelism once: the block cache runs up to
// 4 x NumCPU block computations at once (blockcache.New), shard digests
// add their own, and each computation fans out over chunks of
// chunkWeights weights; whatever that product, at most one chunk per core
// (GOMAXPROCS) is quantised at a time. Waiting chunks take slots in
// arrival order, so the block a reader waits for is not slowed by ones
// started after it, and only running chunks hold a decode buffer: scratch
// memory is at most GOMAXPROCS x chunkWeights float32s beyond the blocks.
var slots struct {
	sync.Mutex
	procs int
	ch    chan struct{}
}

// slotChan returns the slot pool for the current GOMAXPROCS.
func slotChan() chan struct{} {
	slots.Lock()
	defer slots.Unlock()
	if p := runtime.GOMAXPROCS(0); p != slots.procs {
		slots.procs, slots.ch = p, make(chan struct{}, p)
	}
	return slots.ch
}

// buffers recycles the float32 rows of a chunk.
var buffers sync.Pool

// Plan is the q2/ view of a catalog: what becomes of every source
// tensor, where it lands, and how its blocks are computed. It is built from
// the headers alone.
type Plan struct {
	Shards   []*Shard
	External []*checkpoint.Tensor // Engram tables: not copied, recorded
	Dropped  []*checkpoint.Tensor // the MXFP4 scales of quantised experts
	Skipped  []Skip               // routed experts kept native, with the reason
	Repo     string               // source repository, "unknown" when not known
	Revision string               // source revision, "unknown" when not known

	cat   *checkpoint.Catalog
	disk  *diskcache.Cache
	cache vfile.Cache // may be nil

	blocks, quantised, fromDisk atomic.Int64
}

// Shard is one output file of q2/ and the source shard it comes from.
type Shard struct {
	Name    string // the output file, e.g. quant-00001-of-00048.safetensors
	Source  *checkpoint.Shard
	File    *vfile.File
	Tensors []*Tensor            // in data order
	Dropped []*checkpoint.Tensor // scales of this source shard that are dropped

	// Digests is the shard's digests (NAME.manifest.json), generated on
	// first read.
	Digests *vfile.Doc
}

// Header is the output file's safetensors header, length prefix included.
func (sh *Shard) Header() []byte { return sh.File.Segments()[0].(vfile.Bytes) }

// Tensor is one tensor of a q2/ shard.
type Tensor struct {
	Name   string
	Role   string // RoleQuantised, or the catalog role of a tensor copied unchanged
	Source *checkpoint.Tensor
	Type   *GGMLType // nil for a tensor copied unchanged
	DType  safetensors.DType
	Shape  []int64
	Offset int64 // absolute offset of the data in the output file
	Size   int64
	// Blocks is the derived data of a quantised tensor: its rows cut into
	// blocks of whole rows.
	Blocks *vfile.Blocks

	q *Plan
}

// Skip is a main-layer routed expert matrix left native.
type Skip struct {
	Name        string `json:"name"`
	SourceShard string `json:"source_shard"`
	Reason      string `json:"reason"`
}

// In is the number of weights in a row of a quantised tensor (the source's
// logical input dimension).
func (t *Tensor) In() int64 { return 2 * t.Source.Shape[1] }

// Rows is the number of rows of a quantised tensor.
func (t *Tensor) Rows() int64 { return t.Source.Shape[0] }

// RowBytes is the size of an output row of a quantised tensor.
func (t *Tensor) RowBytes() int64 { return t.Shape[1] }

// BlockRows returns the rows [lo, hi) that block i of a quantised tensor
// holds.
func (t *Tensor) BlockRows(i int64) (lo, hi int64) {
	per := t.Blocks.BlockLen / t.RowBytes()
	return i * per, min(t.Rows(), (i+1)*per)
}

// ReadSource reads the MXFP4 codes and scales of rows [lo, hi).
func (t *Tensor) ReadSource(lo, hi int64) (weight, scale []byte, err error) {
	in := t.In()
	weight = make([]byte, (hi-lo)*in/2)
	scale = make([]byte, (hi-lo)*in/codecs.MXBlock)
	if _, err := t.Source.ReadAt(weight, lo*in/2); err != nil {
		return nil, nil, err
	}
	if _, err := t.Source.Scale.ReadAt(scale, lo*in/codecs.MXBlock); err != nil {
		return nil, nil, err
	}
	return weight, scale, nil
}

// BlockKey is the disk-cache key of the output rows made from weight and
// scale (as ReadSource returns them): the SHA-256 of the codec version, the
// ggml type, the geometry and the source bytes (DESIGN.md "Blocks and the
// cache").
func (t *Tensor) BlockKey(weight, scale []byte) diskcache.Key {
	h := sha256.New()
	rows := int64(len(scale)) * codecs.MXBlock / t.In()
	fmt.Fprintf(h, "dsfs q2 block\x00codec %s\x00%s importance %s\x00%d rows x %d weights\x00",
		codecs.Version, t.Type.Name, t.Type.Importance, rows, t.In())
	h.Write(weight)
	h.Write(scale)
	return diskcache.Key(h.Sum(nil))
}

// Quantise decodes the MXFP4 rows in weight and scale exactly and encodes
// them into dst, spreading the rows over every core. It uses no cache.
func (t *Tensor) Quantise(ctx context.Context, weight, scale, dst []byte) error {
	in := t.In()
	rb := t.RowBytes()
	rows := int64(len(dst)) / rb
	per := max(1, chunkWeights/in)
	chunks := (rows + per - 1) / per
	slots := slotChan()
	var next atomic.Int64
	eg, ctx := errgroup.WithContext(ctx)
	for range min(int64(cap(slots)), chunks) {
		eg.Go(func() error {
			for {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return ctx.Err()
				}
				more, err := t.quantiseChunk(ctx, &next, chunks, per, weight, scale, dst)
				<-slots
				if !more || err != nil {
					return err
				}
			}
		})
	}
	return eg.Wait()
}

// quantiseChunk quantises the next of the chunks of per rows, if any is
// left.
func (t *Tensor) quantiseChunk(ctx context.Context, next *atomic.Int64, chunks, per int64, weight, scale, dst []byte) (more bool, err error) {
	c := next.Add(1) - 1
	if c >= chunks {
		return false, nil
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	in, rb := t.In(), t.RowBytes()
	rows := int64(len(dst)) / rb
	lo, hi := c*per, min(rows, (c+1)*per)
	n := int((hi - lo) * in)
	x, _ := buffers.Get().(*[]float32)
	if x == nil || cap(*x) < n {
		x = new([]float32)
		*x = make([]float32, n)
	}
	xs := (*x)[:n]
	codecs.DecodeMXFP4(xs, weight[lo*in/2:hi*in/2], scale[lo*in/codecs.MXBlock:hi*in/codecs.MXBlock])
	t.Type.Quantise(dst[lo*rb:hi*rb], xs)
	buffers.Put(x)
	return true, nil
}

// computeRows fills dst with output rows [lo, hi): from the disk cache when
// it holds them, else by quantising (and then storing them there).
func (t *Tensor) computeRows(ctx context.Context, lo, hi int64, dst []byte) error {
	w, sc, err := t.ReadSource(lo, hi)
	if err != nil {
		return err
	}
	q := t.q
	quantise := func(dst []byte) error {
		if err := t.Quantise(ctx, w, sc, dst); err != nil {
			return fmt.Errorf("%s: tensor %s rows %d-%d: %w", t.Source.Shard.Name, t.Name, lo, hi, err)
		}
		q.quantised.Add(1)
		return nil
	}
	if q.disk == nil {
		return quantise(dst)
	}
	hit, err := q.disk.Through(t.BlockKey(w, sc), dst, quantise)
	if hit {
		q.fromDisk.Add(1)
	}
	return err
}

// Quantised lists the quantised tensors of every shard.
func (q *Plan) Quantised() []*Tensor {
	var ts []*Tensor
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			if t.Type != nil {
				ts = append(ts, t)
			}
		}
	}
	return ts
}

// Stats are the live counters of a q2/ view: how far a full read has got.
type Stats struct {
	Blocks        int64 `json:"blocks"`           // quantised blocks in the view
	Quantised     int64 `json:"blocks_quantised"` // computed by this process
	FromDiskCache int64 `json:"blocks_from_disk_cache"`
}

// Stats returns a snapshot of the counters.
func (q *Plan) Stats() Stats {
	return Stats{Blocks: q.blocks.Load(), Quantised: q.quantised.Load(), FromDiskCache: q.fromDisk.Load()}
}

// quantisable says whether a tensor becomes ggml blocks, and if not but
// it is a main-layer routed expert matrix, why it stays native.
func quantisable(t *checkpoint.Tensor) (ok bool, skip string) {
	if t.Role != checkpoint.RoleRoutedExpert || t.Proj == "" || !strings.HasSuffix(t.Name, ".weight") {
		return false, ""
	}
	switch {
	case t.Format != checkpoint.FormatMXFP4 || t.Scale == nil:
		return false, fmt.Sprintf("format %s, not MXFP4 with a scale", t.Format)
	case len(t.Shape) != 2:
		return false, fmt.Sprintf("shape %v is not a matrix", t.Shape)
	case (2*t.Shape[1])%iq2xxs.BlockWeights != 0:
		return false, fmt.Sprintf("input dimension %d is not a multiple of %d", 2*t.Shape[1], iq2xxs.BlockWeights)
	}
	return true, ""
}

// isEngramTableTensor reports whether t is an Engram table or its scale,
// which q2/ leaves to the source (FORMATS.md "q2/").
func isEngramTableTensor(t *checkpoint.Tensor) bool {
	return t.Role == checkpoint.RoleEngram && strings.Contains(t.Name, "engram.embed.")
}

var shardNumber = regexp.MustCompile(`(\d+-of-\d+)\.safetensors$`)

// ShardNames names the output file of each source shard, good or bad:
// quant-NNNNN-of-MMMMM.safetensors from the source's own numbering, else
// quant-<name>, in the source shard's directory.
func ShardNames(cat *checkpoint.Catalog) map[string]string {
	var shards []string
	for _, sh := range cat.Shards {
		shards = append(shards, sh.Name)
	}
	for _, b := range cat.BadShards {
		shards = append(shards, b.Name)
	}
	names := make(map[string]string, len(shards))
	count := make(map[string]int)
	for _, sh := range shards {
		dir, file := path.Split(sh)
		name := dir + "quant-" + file
		if m := shardNumber.FindStringSubmatch(file); m != nil {
			name = dir + "quant-" + m[1] + ".safetensors"
		}
		names[sh] = name
		count[name]++
	}
	for _, sh := range shards {
		if count[names[sh]] > 1 { // two numberings alike: fall back to the full names
			dir, file := path.Split(sh)
			names[sh] = dir + "quant-" + file
		}
	}
	return names
}

// New lays out the q2/ view of cat from its headers.
func New(cat *checkpoint.Catalog, opt Options) (*Plan, error) {
	q := &Plan{cat: cat, disk: opt.DiskCache, cache: opt.Cache}
	q.Repo, q.Revision = sourceRevision(cat.Dir, opt.Revision)
	names := ShardNames(cat)
	for _, sh := range cat.Shards {
		out := &Shard{Name: names[sh.Name], Source: sh}
		var outs []tensorfile.Out
		byName := make(map[string]*Tensor)
		for _, t := range sh.Tensors {
			ok, skip := quantisable(t)
			switch {
			case ok:
				qt := q.quantisedTensor(t)
				byName[t.Name] = qt
				outs = append(outs, tensorfile.Out{Name: t.Name, DType: qt.DType, Shape: qt.Shape, Data: qt.Blocks})
				continue
			case skip != "":
				q.Skipped = append(q.Skipped, Skip{Name: t.Name, SourceShard: sh.Name, Reason: skip})
			case t.ScaleOf != nil:
				if ok, _ := quantisable(t.ScaleOf); ok {
					q.Dropped = append(q.Dropped, t)
					out.Dropped = append(out.Dropped, t)
					continue
				}
			}
			if isEngramTableTensor(t) {
				q.External = append(q.External, t)
				continue
			}
			byName[t.Name] = &Tensor{Name: t.Name, Role: string(t.Role), Source: t, DType: t.DType, Shape: t.Shape, q: q}
			outs = append(outs, tensorfile.Passthrough(t))
		}
		if len(outs) == 0 {
			continue // a shard left empty (Engram tables only) is omitted
		}
		f, l, err := tensorfile.Layout("q2", outs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", out.Name, err)
		}
		out.File = f
		for _, lt := range l.Tensors {
			qt := byName[lt.Name]
			qt.Offset, qt.Size = l.DataStart()+lt.Begin, lt.Len()
			out.Tensors = append(out.Tensors, qt)
		}
		out.Digests = vfile.NewDoc(func(ctx context.Context) ([]byte, error) { return q.shardDigests(ctx, out) })
		q.Shards = append(q.Shards, out)
	}
	return q, nil
}

// quantisedTensor lays out a routed expert matrix as ggml blocks.
func (q *Plan) quantisedTensor(t *checkpoint.Tensor) *Tensor {
	qt := newQuantised(t)
	qt.q = q
	qt.Blocks = tensorfile.RowBlocks("q2/"+t.Name, qt.Shape[0], qt.Shape[1], qt.computeRows)
	q.blocks.Add(qt.Blocks.Count())
	return qt
}

// newQuantised is a routed expert matrix as ggml rows of its type: a row
// of 2·cols weights in BlockWeights blocks.
func newQuantised(t *checkpoint.Tensor) *Tensor {
	typ := typeOf(t.Proj)
	rb := 2 * t.Shape[1] / int64(typ.BlockWeights) * int64(typ.BlockBytes)
	return &Tensor{Name: t.Name, Role: RoleQuantised, Source: t, Type: typ, DType: safetensors.U8, Shape: []int64{t.Shape[0], rb}}
}

// sourceRevision finds the repository and revision of a checkpoint: the
// revision given, else a Hugging Face cache snapshot's directory name
// (.../models--ORG--NAME/snapshots/REV), else "unknown".
func sourceRevision(dir, revision string) (repo, rev string) {
	repo, rev = "unknown", "unknown"
	snap, parent := filepath.Base(dir), filepath.Dir(dir)
	if filepath.Base(parent) == "snapshots" {
		if r, ok := strings.CutPrefix(filepath.Base(filepath.Dir(parent)), "models--"); ok && r != "" {
			repo = strings.Replace(r, "--", "/", 1)
			rev = snap
		}
	}
	if revision != "" {
		rev = revision
	}
	return repo, rev
}

// sha256Tensor hashes a source tensor's bytes.
func sha256Tensor(ctx context.Context, t *checkpoint.Tensor) (string, error) {
	return vfile.SHA256(ctx, t, 0, t.Size)
}

// sha256Blocks hashes the derived bytes of a quantised tensor, block by
// block through the block cache the files are read through (so a shard
// read before or after its digests is quantised once), or computing them
// when there is none; computing goes through the disk cache when there is
// one.
func (q *Plan) sha256Blocks(ctx context.Context, b *vfile.Blocks) (string, error) {
	h := sha256.New()
	var buf []byte
	if q.cache == nil {
		buf = make([]byte, b.BlockLen)
	}
	for i := range b.Count() {
		p, err := vfile.ReadBlock(ctx, q.cache, b, i, buf)
		if err != nil {
			return "", err
		}
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// hashAll runs fn for 0..n-1 on every core.
func hashAll(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(workers())
	for i := range n {
		eg.Go(func() error {
			if err := ctx.Err(); err != nil {
				return err
			}
			return fn(ctx, i)
		})
	}
	return eg.Wait()
}
