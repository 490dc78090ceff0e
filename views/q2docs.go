package views

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"

	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/manifest"
)

// The documents of q2/ follow the seed's field names (FORMATS.md "q2/").
// plan.json and README.md come from the headers alone and are instant; a
// shard manifest needs the shard's output digests, so reading one quantises
// the whole shard (through the disk cache, which also keeps the finished
// manifest); manifest.json aggregates every shard manifest and hashes the
// external Engram tables. No document holds a wall-clock time, so a mount
// and an export of one source agree byte for byte.

// Q2Recipe is what one projection becomes.
type Q2Recipe struct {
	GGMLType      string  `json:"ggml_type"`
	BitsPerWeight float64 `json:"bits_per_weight"`
	Importance    string  `json:"importance"`
}

// Q2Importance says which importance vectors the recipe uses.
type Q2Importance struct {
	Imatrix     bool   `json:"imatrix"`
	Calibration string `json:"calibration"`
	IQ2XXS      string `json:"IQ2_XXS"`
	Q2K         string `json:"Q2_K"`
}

// Q2Totals are the plan's figures, from the headers.
type Q2Totals struct {
	SourceTensors           int   `json:"source_tensors"`
	SourceBytes             int64 `json:"source_bytes"`
	Shards                  int   `json:"shards"`
	OutputTensors           int   `json:"output_tensors"`
	OutputBytes             int64 `json:"output_bytes"` // tensor data of every output shard
	FileBytes               int64 `json:"file_bytes"`   // output shard files, headers included
	QuantisedTensors        int   `json:"quantised_tensors"`
	QuantisedBytes          int64 `json:"quantised_bytes"`
	QuantisedLogicalWeights int64 `json:"quantised_logical_weights"`
	QuantisedSourceBytes    int64 `json:"quantised_source_bytes"` // MXFP4 codes and scales replaced
	NativeTensors           int   `json:"native_tensors"`
	NativeBytes             int64 `json:"native_bytes"`
	ExternalTensors         int   `json:"external_tensors"`
	ExternalBytes           int64 `json:"external_bytes"`
	DroppedTensors          int   `json:"dropped_tensors"`
	DroppedBytes            int64 `json:"dropped_bytes"`
	SkippedTensors          int   `json:"skipped_tensors"`
}

// Q2PlanTensor is one output tensor in plan.json.
type Q2PlanTensor struct {
	Name         string   `json:"name"`
	Role         string   `json:"role"`
	SourceShard  string   `json:"source_shard"`
	SourceRange  [2]int64 `json:"source_range"` // [begin, end) in the source shard file
	SourceDType  string   `json:"source_dtype"`
	SourceShape  []int64  `json:"source_shape"`
	OutputShard  string   `json:"output_shard"`
	OutputOffset int64    `json:"output_offset"` // in the output shard file
	OutputBytes  int64    `json:"output_bytes"`
	OutputDType  string   `json:"output_dtype"`
	OutputShape  []int64  `json:"output_shape"`
	GGMLType     string   `json:"ggml_type,omitempty"`
	LogicalShape []int64  `json:"logical_shape,omitempty"` // [out, in] weights of a quantised tensor
	BlocksPerRow int64    `json:"blocks_per_row,omitempty"`
	BytesPerRow  int64    `json:"bytes_per_row,omitempty"`
}

// Q2PlanShard is one output shard in plan.json.
type Q2PlanShard struct {
	OutputShard string         `json:"output_shard"`
	SourceShard string         `json:"source_shard"`
	FileBytes   int64          `json:"file_bytes"`
	HeaderBytes int64          `json:"header_bytes"`
	Tensors     []Q2PlanTensor `json:"tensors"`
}

// Q2SourceRef is a source tensor q2/ does not copy (external or dropped).
type Q2SourceRef struct {
	Name        string   `json:"name"`
	Role        string   `json:"role"`
	SourceShard string   `json:"source_shard"`
	SourceRange [2]int64 `json:"source_range"`
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	Bytes       int64    `json:"bytes"`
	SHA256      string   `json:"sha256,omitempty"` // in manifest.json; the plan reads no data
}

// Q2Plan is plan.json.
type Q2Plan struct {
	Artifact       string              `json:"artifact"`
	DSFSVersion    string              `json:"dsfs_version"`
	CodecVersion   string              `json:"codec_version"`
	Quantiser      string              `json:"quantiser"`
	SourceRepo     string              `json:"source_repo"`
	SourceRevision string              `json:"source_revision"`
	Recipe         map[string]Q2Recipe `json:"recipe"`
	Importance     Q2Importance        `json:"importance"`
	Totals         Q2Totals            `json:"totals"`
	Shards         []Q2PlanShard       `json:"shards"`
	External       []Q2SourceRef       `json:"external"`
	Dropped        []Q2SourceRef       `json:"dropped"`
	Skipped        []Q2Skip            `json:"skipped"`
}

// Q2ManifestTensor is one tensor of a shard manifest.
type Q2ManifestTensor struct {
	Name         string  `json:"name"`
	GGMLType     string  `json:"ggml_type,omitempty"`
	OutputDType  string  `json:"output_dtype"`
	OutputShape  []int64 `json:"output_shape"`
	OutputBytes  int64   `json:"output_bytes"`
	OutputSHA256 string  `json:"output_sha256"`
	SourceSHA256 string  `json:"source_sha256"`
}

// Q2SourceDigest is a dropped source tensor's digest.
type Q2SourceDigest struct {
	Name         string `json:"name"`
	SourceSHA256 string `json:"source_sha256"`
}

// Q2ShardManifest is quant-*.safetensors.manifest.json.
type Q2ShardManifest struct {
	OutputShard  string             `json:"output_shard"`
	SourceShard  string             `json:"source_shard"`
	FileBytes    int64              `json:"file_bytes"`
	CodecVersion string             `json:"codec_version"`
	Tensors      []Q2ManifestTensor `json:"tensors"`
	Dropped      []Q2SourceDigest   `json:"dropped"`
}

// Q2RoleFigures counts tensors and bytes of one role or type.
type Q2RoleFigures struct {
	Tensors int   `json:"tensors"`
	Bytes   int64 `json:"bytes"`
}

// Q2ShardDigest is one shard's line of manifest.json.
type Q2ShardDigest struct {
	OutputShard          string `json:"output_shard"`
	SourceShard          string `json:"source_shard"`
	Tensors              int    `json:"tensors"`
	FileBytes            int64  `json:"file_bytes"`
	DataBytes            int64  `json:"data_bytes"`
	DigestOfShardDigests string `json:"digest_of_shard_digests"`
}

// Q2ManifestTotals are manifest.json's totals: the plan's, and what the
// shard manifests say.
type Q2ManifestTotals struct {
	Q2Totals
	ShardsPlanned            int                      `json:"shards_planned"`
	ShardsProduced           int                      `json:"shards_produced"`
	MissingShards            []string                 `json:"missing_shards"`
	UnexpectedShards         []string                 `json:"unexpected_shards"`
	BytesByRole              map[string]Q2RoleFigures `json:"bytes_by_role"`
	QuantisedBytesByType     map[string]Q2RoleFigures `json:"quantised_bytes_by_type"`
	OutputBytesFromManifests int64                    `json:"output_bytes_from_manifests"`
}

// Q2SourceInfo names the source in manifest.json.
type Q2SourceInfo struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Tensors  int    `json:"tensors"`
}

// Q2Manifest is manifest.json.
type Q2Manifest struct {
	Artifact            string              `json:"artifact"`
	Source              Q2SourceInfo        `json:"source"`
	Recipe              map[string]Q2Recipe `json:"recipe"`
	Importance          Q2Importance        `json:"importance"`
	Quantiser           string              `json:"quantiser"`
	Totals              Q2ManifestTotals    `json:"totals"`
	Environment         map[string]string   `json:"environment"`
	ExternalNative      []Q2SourceRef       `json:"external_native"`
	DroppedExpertScales int                 `json:"dropped_expert_scales"`
	Shards              []Q2ShardDigest     `json:"shards"`
}

func q2Recipe() map[string]Q2Recipe {
	r := func(t *GGMLType) Q2Recipe { return Q2Recipe{t.Name, t.BitsPerWeight, t.Importance} }
	return map[string]Q2Recipe{"w1": r(q2TypeOf("w1")), "w2": r(q2TypeOf("w2")), "w3": r(q2TypeOf("w3"))}
}

func q2Importance() Q2Importance {
	return Q2Importance{
		Calibration: "none: no activations were collected and no importance matrix was consumed",
		IQ2XXS:      "a constant unit importance vector (1.0 per column): ggml's quantize_row_iq2_xxs_impl",
		Q2K:         "none: ggml's reference path quantize_row_q2_K_ref",
	}
}

// title names the model in the documents: the repository, else what
// config.json calls the model and the source directory it was read from
// (a checkpoint outside a Hugging Face cache has no repository name).
func (q *Q2) title() string {
	if q.Repo != "unknown" {
		return q.Repo
	}
	dir := filepath.Base(q.cat.Dir)
	if c := q.cat.Config; len(c.Architectures) > 0 {
		return c.Architectures[0] + " checkpoint " + dir
	} else if c.ModelType != "" {
		return c.ModelType + " checkpoint " + dir
	}
	return "checkpoint " + dir
}

func (q *Q2) artifact() string { return q.title() + " mixed-Q2 routed experts" }

func sourceRange(t *manifest.Tensor) [2]int64 { return [2]int64{t.Offset, t.Offset + t.Size} }

func sourceRef(t *manifest.Tensor, role string) Q2SourceRef {
	return Q2SourceRef{Name: t.Name, Role: role, SourceShard: t.Shard.Name, SourceRange: sourceRange(t),
		DType: string(t.DType), Shape: t.Shape, Bytes: t.Size}
}

// Plan returns plan.json: the full tensor map, from the headers.
func (q *Q2) Plan() *Q2Plan {
	p := &Q2Plan{
		Artifact: q.artifact(), DSFSVersion: dsfsVersion(), CodecVersion: codecs.Version, Quantiser: Q2Quantiser,
		SourceRepo: q.Repo, SourceRevision: q.Revision, Recipe: q2Recipe(), Importance: q2Importance(),
		Shards: []Q2PlanShard{}, External: []Q2SourceRef{}, Dropped: []Q2SourceRef{}, Skipped: []Q2Skip{},
	}
	tt := &p.Totals
	tt.SourceTensors = len(q.cat.Tensors)
	for _, t := range q.cat.Tensors {
		tt.SourceBytes += t.Size
	}
	for _, sh := range q.Shards {
		ps := Q2PlanShard{OutputShard: sh.Name, SourceShard: sh.Source.Name, FileBytes: sh.File.Size(),
			HeaderBytes: int64(len(sh.Header()))}
		for _, t := range sh.Tensors {
			pt := Q2PlanTensor{Name: t.Name, Role: t.Role, SourceShard: t.Source.Shard.Name, SourceRange: sourceRange(t.Source),
				SourceDType: string(t.Source.DType), SourceShape: t.Source.Shape, OutputShard: sh.Name,
				OutputOffset: t.Offset, OutputBytes: t.Size, OutputDType: string(t.DType), OutputShape: t.Shape}
			tt.OutputTensors++
			tt.OutputBytes += t.Size
			if t.Type != nil {
				pt.GGMLType = t.Type.Name
				pt.LogicalShape = []int64{t.Rows(), t.In()}
				pt.BlocksPerRow = t.In() / int64(t.Type.BlockWeights)
				pt.BytesPerRow = t.RowBytes()
				tt.QuantisedTensors++
				tt.QuantisedBytes += t.Size
				tt.QuantisedLogicalWeights += t.Rows() * t.In()
				tt.QuantisedSourceBytes += t.Source.Size + t.Source.Scale.Size
			} else {
				tt.NativeTensors++
				tt.NativeBytes += t.Size
			}
			ps.Tensors = append(ps.Tensors, pt)
		}
		tt.Shards++
		tt.FileBytes += ps.FileBytes
		p.Shards = append(p.Shards, ps)
	}
	for _, t := range q.External {
		p.External = append(p.External, sourceRef(t, Q2RoleExternal))
		tt.ExternalTensors++
		tt.ExternalBytes += t.Size
	}
	for _, t := range q.Dropped {
		p.Dropped = append(p.Dropped, sourceRef(t, Q2RoleDropped))
		tt.DroppedTensors++
		tt.DroppedBytes += t.Size
	}
	p.Skipped = append(p.Skipped, q.Skipped...)
	tt.SkippedTensors = len(q.Skipped)
	return p
}

// shardManifest computes a shard's manifest: the source digest of every
// tensor it holds or drops, and the output digest of every tensor (a
// native tensor's is its source digest; a quantised one's needs all its
// blocks). The finished document is kept in the disk cache under a key
// made of the layout and the source digests.
func (q *Q2) shardManifest(ctx context.Context, sh *Q2Shard) ([]byte, error) {
	m := Q2ShardManifest{OutputShard: sh.Name, SourceShard: sh.Source.Name, FileBytes: sh.File.Size(),
		CodecVersion: codecs.Version, Tensors: make([]Q2ManifestTensor, len(sh.Tensors)),
		Dropped: make([]Q2SourceDigest, len(sh.Dropped))}
	sources := make([]*manifest.Tensor, 0, len(sh.Tensors)+len(sh.Dropped))
	for _, t := range sh.Tensors {
		sources = append(sources, t.Source)
	}
	sources = append(sources, sh.Dropped...)
	digests := make([]string, len(sources))
	err := hashAll(ctx, len(sources), func(ctx context.Context, i int) (err error) {
		digests[i], err = sha256Tensor(ctx, sources[i])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sh.Name, err)
	}
	var key diskcache.Key
	if q.disk != nil {
		h := sha256.New()
		fmt.Fprintf(h, "dsfs q2 shard manifest\x00codec %s\x00%s\x00%s\x00", codecs.Version, sh.Name, sh.Source.Name)
		h.Write(sh.Header())
		for i, t := range sources {
			fmt.Fprintf(h, "%s\x00%s\x00", t.Name, digests[i])
		}
		key = diskcache.Key(h.Sum(nil))
		if b, ok := q.disk.GetBytes(key); ok {
			return b, nil
		}
	}
	for i, t := range sh.Tensors {
		m.Tensors[i] = Q2ManifestTensor{Name: t.Name, OutputDType: string(t.DType), OutputShape: t.Shape,
			OutputBytes: t.Size, OutputSHA256: digests[i], SourceSHA256: digests[i]}
		if t.Type != nil {
			m.Tensors[i].GGMLType = t.Type.Name
		}
	}
	for i, t := range sh.Dropped {
		m.Dropped[i] = Q2SourceDigest{Name: t.Name, SourceSHA256: digests[len(sh.Tensors)+i]}
	}
	quantised := make([]int, 0, len(sh.Tensors))
	for i, t := range sh.Tensors {
		if t.Type != nil {
			quantised = append(quantised, i)
		}
	}
	err = hashAll(ctx, len(quantised), func(ctx context.Context, j int) (err error) {
		i := quantised[j]
		m.Tensors[i].OutputSHA256, err = q.sha256Blocks(ctx, sh.Tensors[i].Blocks)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sh.Name, err)
	}
	b := mustJSON(m)
	if q.disk != nil {
		q.disk.Put(key, b) // a failed write costs a recomputation next time, no more
	}
	return b, nil
}

// ShardManifest returns the manifest of output shard sh, computing it on
// first use.
func (q *Q2) ShardManifest(ctx context.Context, sh *Q2Shard) (*Q2ShardManifest, error) {
	b, err := sh.manifest.Bytes(ctx)
	if err != nil {
		return nil, err
	}
	var m Q2ShardManifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s.manifest.json: %w", sh.Name, err)
	}
	return &m, nil
}

// Manifest returns manifest.json: the seed's aggregation over the shard
// manifests (which it computes, quantising every shard not yet done) plus
// the digests of the external Engram tables.
func (q *Q2) Manifest(ctx context.Context) (*Q2Manifest, error) {
	plan := q.Plan()
	role := make(map[string]string)
	ggml := make(map[string]string)
	for _, sh := range plan.Shards {
		for _, t := range sh.Tensors {
			role[t.Name] = t.Role
			if t.GGMLType != "" {
				ggml[t.Name] = t.GGMLType
			}
		}
	}
	m := &Q2Manifest{
		Artifact: plan.Artifact,
		Source:   Q2SourceInfo{Repo: q.Repo, Revision: q.Revision, Tensors: plan.Totals.SourceTensors},
		Recipe:   plan.Recipe, Importance: plan.Importance, Quantiser: Q2Quantiser,
		Totals: Q2ManifestTotals{Q2Totals: plan.Totals, ShardsPlanned: len(plan.Shards),
			MissingShards: []string{}, UnexpectedShards: []string{},
			BytesByRole: map[string]Q2RoleFigures{}, QuantisedBytesByType: map[string]Q2RoleFigures{}},
		Environment:         q2Environment(),
		ExternalNative:      plan.External,
		DroppedExpertScales: len(plan.Dropped),
		Shards:              []Q2ShardDigest{},
	}
	for _, sh := range q.Shards {
		sm, err := q.ShardManifest(ctx, sh)
		if err != nil {
			return nil, err
		}
		tensors := append([]Q2ManifestTensor(nil), sm.Tensors...)
		sort.Slice(tensors, func(i, j int) bool { return tensors[i].Name < tensors[j].Name })
		h := sha256.New()
		var data int64
		for _, t := range tensors {
			r := role[t.Name]
			if r == "" {
				r = "unknown"
			}
			f := m.Totals.BytesByRole[r]
			f.Tensors++
			f.Bytes += t.OutputBytes
			m.Totals.BytesByRole[r] = f
			if r == Q2RoleQuantised {
				f := m.Totals.QuantisedBytesByType[ggml[t.Name]]
				f.Tensors++
				f.Bytes += t.OutputBytes
				m.Totals.QuantisedBytesByType[ggml[t.Name]] = f
			}
			data += t.OutputBytes
			h.Write([]byte(t.Name))
			h.Write([]byte(t.OutputSHA256))
		}
		m.Totals.OutputBytesFromManifests += data
		m.Totals.ShardsProduced++
		m.Shards = append(m.Shards, Q2ShardDigest{OutputShard: sm.OutputShard, SourceShard: sm.SourceShard,
			Tensors: len(sm.Tensors), FileBytes: sm.FileBytes, DataBytes: data,
			DigestOfShardDigests: fmt.Sprintf("%x", h.Sum(nil))})
	}
	m.ExternalNative = append([]Q2SourceRef(nil), plan.External...)
	err := hashAll(ctx, len(q.External), func(ctx context.Context, i int) (err error) {
		m.ExternalNative[i].SHA256, err = sha256Tensor(ctx, q.External[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// q2Environment is what the documents record of the machine. The bytes do
// not depend on it (see README.md "Reproducibility").
func q2Environment() map[string]string {
	return map[string]string{
		"dsfs":      dsfsVersion(),
		"codec":     codecs.Version,
		"go":        runtime.Version(),
		"platform":  runtime.GOOS + "/" + runtime.GOARCH,
		"quantiser": Q2Quantiser,
	}
}

// humanGB writes bytes as decimal gigabytes with two decimals and
// thousands separators, as the seed's README does.
func humanGB(n int64) string {
	s := strconv.FormatFloat(float64(n)/1e9, 'f', 2, 64)
	whole, frac, _ := strings.Cut(s, ".")
	return thousands(whole) + "." + frac
}

// commas writes an integer with thousands separators.
func commas(n int64) string {
	if n < 0 {
		return "-" + thousands(strconv.FormatInt(-n, 10))
	}
	return thousands(strconv.FormatInt(n, 10))
}

func thousands(digits string) string {
	var b strings.Builder
	for i, c := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// README returns README.md: the seed's template filled with this
// checkpoint's figures, all taken from the plan.
func (q *Q2) README() []byte {
	p := q.Plan()
	tt := p.Totals
	var b strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	type typeFig struct {
		tensors int
		weights int64
	}
	byType := map[string]*typeFig{IQ2XXS.Name: {}, Q2K.Name: {}}
	type geom struct {
		typ     string
		out, in int64
	}
	projs := make(map[geom]map[string]bool)
	layers, experts := make(map[int]bool), make(map[int]bool)
	roles := make(map[string]*Q2RoleFigures)
	dtypes := make(map[string]bool)
	mtp := 0
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			r := roles[t.Role]
			if r == nil {
				r = &Q2RoleFigures{}
				roles[t.Role] = r
			}
			r.Tensors++
			r.Bytes += t.Size
			if t.Type == nil {
				dtypes[string(t.DType)] = true
				if t.Source.Role == manifest.RoleMTPExpert {
					mtp++
				}
				continue
			}
			f := byType[t.Type.Name]
			f.tensors++
			f.weights += t.Rows() * t.In()
			g := geom{t.Type.Name, t.Rows(), t.In()}
			if projs[g] == nil {
				projs[g] = make(map[string]bool)
			}
			projs[g][t.Source.Proj] = true
			layers[t.Source.Layer] = true
			experts[t.Source.Expert] = true
		}
	}

	w("# %s mixed-Q2 routed experts (revision `%s`)\n\n", q.title(), q.Revision)
	w("Quantised derivative of `%s` revision `%s`, served by dsfs `%s` as its `q2/` view:\n", q.Repo, q.Revision, dsfsVersion())
	w("every byte is computed from the source checkpoint when it is read.\nQuantiser: %s.\n\n", Q2Quantiser)

	w("## What this is\n\n")
	w("The source checkpoint stores routed experts as MXFP4: 16 bytes of packed E2M1 values plus one E8M0\n")
	w("scale byte per 32 weights (4.25 bits/weight). This view decodes exactly those blocks and stores the\n")
	w("main-layer routed expert matrices (%d layers, %d experts) as ggml blocks:\n\n", len(layers), len(experts))
	w("| projection | ggml type | bits/weight | tensors | weights |\n|---|---|---:|---:|---:|\n")
	w("| gate/up `w1`, `w3` | %s | %g | %s | %s |\n", IQ2XXS.Name, IQ2XXS.BitsPerWeight,
		commas(int64(byType[IQ2XXS.Name].tensors)), commas(byType[IQ2XXS.Name].weights))
	w("| down `w2` | %s | %g | %s | %s |\n\n", Q2K.Name, Q2K.BitsPerWeight,
		commas(int64(byType[Q2K.Name].tensors)), commas(byType[Q2K.Name].weights))
	w("Block geometry (blocks run along the input/reduction dimension; ggml lists `ne` fastest-first, so\n")
	w("the same bytes are `ne=[in, out]`):\n\n")
	w("| tensor | logical out x in | ggml type | blocks/row | bytes/row | first block offset |\n|---|---|---:|---:|---:|---|\n")
	geoms := make([]geom, 0, len(projs))
	for g := range projs {
		geoms = append(geoms, g)
	}
	sort.Slice(geoms, func(i, j int) bool {
		a, c := geoms[i], geoms[j]
		if a.typ != c.typ {
			return a.typ < c.typ
		}
		if a.out != c.out {
			return a.out < c.out
		}
		return a.in < c.in
	})
	for _, g := range geoms {
		var names []string
		for p := range projs[g] {
			names = append(names, "`"+p+".weight`")
		}
		sort.Strings(names)
		typ := IQ2XXS
		if g.typ == Q2K.Name {
			typ = Q2K
		}
		blocks := g.in / int64(typ.BlockWeights)
		w("| %s | %d x %d | %s | %d | %d | 0 |\n", strings.Join(names, ", "), g.out, g.in, g.typ, blocks, blocks*int64(typ.BlockBytes))
	}
	if len(geoms) == 0 {
		w("| (none: this checkpoint has no MXFP4 routed experts to quantise) | | | | | |\n")
	}
	w("\nEach expert tensor is a contiguous row-major sequence of those rows, so a carrier reads whole\n")
	w("blocks per row with no extra permutation.\n\n")
	bits := 0.0
	if tt.QuantisedLogicalWeights > 0 {
		bits = math.Round(8*float64(tt.QuantisedBytes)/float64(tt.QuantisedLogicalWeights)*1e4) / 1e4
	}
	w("Total quantised payload **%s GB** for **%s** routed weights\n", humanGB(tt.QuantisedBytes), commas(tt.QuantisedLogicalWeights))
	w("(%g bits/weight average). The q2/ shards hold **%s GB** in all (quantised experts plus every\n", bits, humanGB(tt.FileBytes))
	w("native tensor); the Engram tables (%s GB) stay with the source.\n\n", humanGB(tt.ExternalBytes))
	w("Quantisation is **not imatrix-based**. No activation calibration was collected and no importance\n")
	w("matrix was consumed: IQ2_XXS is called with a constant unit importance vector (the unweighted\n")
	w("reference path) and Q2_K takes ggml's reference path without importance. That is a deliberate\n")
	w("recipe choice, not a calibrated one.\n\n")

	w("## Contents\n\n| group | tensors | GB |\n|---|---:|---:|\n")
	roleNames := make([]string, 0, len(roles))
	for r := range roles {
		roleNames = append(roleNames, r)
	}
	sort.Strings(roleNames)
	for _, r := range roleNames {
		w("| %s | %s | %s |\n", r, commas(int64(roles[r].Tensors)), humanGB(roles[r].Bytes))
	}
	dt := make([]string, 0, len(dtypes))
	for d := range dtypes {
		dt = append(dt, "`"+d+"`")
	}
	sort.Strings(dt)
	w("\nEvery tensor other than the requantised experts is copied byte-for-byte from the source with its\n")
	w("original dtype string (%s).\n", strings.Join(dt, ", "))
	w("Requantised expert tensors keep their original names and are stored as `U8` block bytes; the\n")
	w("per-tensor ggml type, byte shape and block geometry are recorded in `plan.json` and in each shard\n")
	w("manifest. The %s MTP expert tensors (the DSpark draft stages' experts, `mtp.M.ffn.experts.*`)\n", commas(int64(mtp)))
	w("are copied native, MXFP4 codes with their scales, as the seed does: it quantises the main layers'\n")
	w("routed experts only.\n\n")
	var ext []string
	for _, t := range q.External {
		if t.ScaleOf == nil {
			ext = append(ext, "`"+base(t.Name)+".*`")
		}
	}
	w("The %s Engram tensors (%s,\n%s GB) are **not** copied: they stay native in the source. `manifest.json`\n",
		commas(int64(tt.ExternalTensors)), listOrNone(ext), humanGB(tt.ExternalBytes))
	w("records their source shard, byte range and source digest so a loader can attach them from the\n")
	w("same source revision. The %s MXFP4 scale tensors of the requantised experts (%s GB) are dropped\n",
		commas(int64(tt.DroppedTensors)), humanGB(tt.DroppedBytes))
	w("because IQ2_XXS and Q2_K carry their own scales; their source digests are in the shard manifests.\n")
	if tt.SkippedTensors > 0 {
		w("%s main-layer routed expert matrices stay native because they cannot be quantised as planned\n", commas(int64(tt.SkippedTensors)))
		w("(`plan.json` lists each under `skipped` with the reason).\n")
	}

	w("\n## Layout\n\n| output shard | source shard | tensors | GB |\n|---|---|---:|---:|\n")
	for _, sh := range p.Shards {
		w("| `%s` | `%s` | %s | %s |\n", sh.OutputShard, sh.SourceShard, commas(int64(len(sh.Tensors))), humanGB(sh.FileBytes))
	}
	w("| **total** | | **%s** | **%s GB** |\n\n", commas(int64(tt.OutputTensors)), humanGB(tt.FileBytes))
	w("`plan.json` holds the full tensor map (source shard, byte range, role, output shard, output offset,\n")
	w("output shape and type). Each `quant-*.safetensors` shard has a matching `.manifest.json` with\n")
	w("per-tensor source and output SHA-256 digests; it is computed when first read, which quantises the\n")
	w("whole shard (a `--cache-dir` keeps the blocks and the manifest for the next mount).\n\n")

	w("## Verification\n\n```bash\n")
	w("dsfs verify q2 <source dir> --against <exported q2 dir or cache dir> --sample 0   # every block and digest\n")
	w("dsfs audit q2 <source dir> --json audit.json                                       # fidelity\n```\n\n")
	w("`audit.json` reports cosine similarity and relative RMS error of the dequantised blocks against the\n")
	w("exact MXFP4 decode, per projection, with the Go ports of ggml's dequantisers.\n\n")

	w("## Reproducibility\n\n")
	env := q2Environment()
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w("- %s: `%s`\n", k, env[k])
	}
	w("\nThe quantisers are a Go port of ggml commit d99724f2 (llama.cpp d3cf1f14) built for generic x86-64\n")
	w("without fused multiply-add; they reproduce ggml's bytes on every reference vector. The seed's pinned\n")
	w("llama.cpp commit 465e49b9 was not built: its quantisers were compared by reading and should agree.\n")
	w("The port rounds every float32 operation where ggml's generic build does and never fuses, so its bytes\n")
	w("should not depend on the CPU, the number of cores or GOARCH; that has been checked on x86-64 only.\n")
	w("ggml's own SIMD builds (AVX2, AVX-512, NEON) are **not** bit-identical to that reference: they select\n")
	w("different IQ2_XXS codepoints and can differ in Q2_K rounding, so re-quantising with llama.cpp on\n")
	w("such a build reproduces the recipe, not these bytes. Compare fidelity through `audit.json` then.\n\n")

	w("## Limits\n\n")
	w("This is a weights artifact. No runtime for these quantised experts has been run here, so nothing\n")
	w("has been executed end to end and none of these numbers are behavioural results. The blocks are the\n")
	w("inputs a fused-kernel carrier needs; executing them requires kernels for IQ2_XXS/Q2_K experts plus\n")
	w("host-resident Engram lookup. Reading every block of q2/ quantises all %s routed weights once\n", commas(tt.QuantisedLogicalWeights))
	w("(a `--cache-dir` keeps them for later mounts); `.dsfs/stats.json` shows how far it has got.\n")
	return []byte(b.String())
}

// listOrNone joins names for prose, or says there are none.
func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none in this checkpoint"
	}
	if len(names) > 8 {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:8], ", "), len(names)-8)
	}
	return strings.Join(names, ", ")
}
