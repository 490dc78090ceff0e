package q2

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
	"github.com/dsfs/dsfs/internal/build"
	"github.com/dsfs/dsfs/vfile"
)

// The documents of q2/ follow the seed's field names and file names
// (FORMATS.md "q2/"): the seed calls q2's digests manifests, so a shard's
// digests are NAME.manifest.json and every shard's are manifest.json.
// plan.json and README.md come from the headers alone and are instant; a
// shard's digests need its quantised bytes, so reading them quantises the
// whole shard (through the disk cache, which also keeps the finished
// document); manifest.json aggregates every shard's digests and hashes the
// external Engram tables. No document holds a wall-clock time, so a mount
// and an export of one source agree byte for byte.

// Recipe is what one projection becomes.
type Recipe struct {
	GGMLType      string  `json:"ggml_type"`
	BitsPerWeight float64 `json:"bits_per_weight"`
	Importance    string  `json:"importance"`
}

// Importance says which importance vectors the recipe uses.
type Importance struct {
	Imatrix     bool   `json:"imatrix"`
	Calibration string `json:"calibration"`
	IQ2XXS      string `json:"IQ2_XXS"`
	Q2K         string `json:"Q2_K"`
}

// Totals are the plan's figures, from the headers.
type Totals struct {
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

// PlanTensor is one output tensor in plan.json.
type PlanTensor struct {
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

// PlanShard is one output shard in plan.json.
type PlanShard struct {
	OutputShard string       `json:"output_shard"`
	SourceShard string       `json:"source_shard"`
	FileBytes   int64        `json:"file_bytes"`
	HeaderBytes int64        `json:"header_bytes"`
	Tensors     []PlanTensor `json:"tensors"`
}

// SourceRef is a source tensor q2/ does not copy (external or dropped).
type SourceRef struct {
	Name        string   `json:"name"`
	Role        string   `json:"role"`
	SourceShard string   `json:"source_shard"`
	SourceRange [2]int64 `json:"source_range"`
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	Bytes       int64    `json:"bytes"`
	SHA256      string   `json:"sha256,omitempty"` // in manifest.json; the plan reads no data
}

// PlanDoc is plan.json.
type PlanDoc struct {
	Artifact       string            `json:"artifact"`
	DSFSVersion    string            `json:"dsfs_version"`
	CodecVersion   string            `json:"codec_version"`
	Quantiser      string            `json:"quantiser"`
	SourceRepo     string            `json:"source_repo"`
	SourceRevision string            `json:"source_revision"`
	Recipe         map[string]Recipe `json:"recipe"`
	Importance     Importance        `json:"importance"`
	Totals         Totals            `json:"totals"`
	Shards         []PlanShard       `json:"shards"`
	External       []SourceRef       `json:"external"`
	Dropped        []SourceRef       `json:"dropped"`
	Skipped        []Skip            `json:"skipped"`
}

// TensorDigest is one tensor's line of ShardDigests: its output and source
// SHA-256.
type TensorDigest struct {
	Name         string  `json:"name"`
	GGMLType     string  `json:"ggml_type,omitempty"`
	OutputDType  string  `json:"output_dtype"`
	OutputShape  []int64 `json:"output_shape"`
	OutputBytes  int64   `json:"output_bytes"`
	OutputSHA256 string  `json:"output_sha256"`
	SourceSHA256 string  `json:"source_sha256"`
}

// SourceDigest is a dropped source tensor's digest.
type SourceDigest struct {
	Name         string `json:"name"`
	SourceSHA256 string `json:"source_sha256"`
}

// ShardDigests is quant-*.safetensors.manifest.json: the digests of one
// output shard's tensors and of the source tensors it drops.
type ShardDigests struct {
	OutputShard  string         `json:"output_shard"`
	SourceShard  string         `json:"source_shard"`
	FileBytes    int64          `json:"file_bytes"`
	CodecVersion string         `json:"codec_version"`
	Tensors      []TensorDigest `json:"tensors"`
	Dropped      []SourceDigest `json:"dropped"`
}

// RoleFigures counts tensors and bytes of one role or type.
type RoleFigures struct {
	Tensors int   `json:"tensors"`
	Bytes   int64 `json:"bytes"`
}

// DigestsShard is one shard's line of DigestsDoc: its figures and the
// digest of its tensors' digests.
type DigestsShard struct {
	OutputShard          string `json:"output_shard"`
	SourceShard          string `json:"source_shard"`
	Tensors              int    `json:"tensors"`
	FileBytes            int64  `json:"file_bytes"`
	DataBytes            int64  `json:"data_bytes"`
	DigestOfShardDigests string `json:"digest_of_shard_digests"`
}

// DigestsTotals are DigestsDoc's totals: the plan's, and what the shards'
// digests say.
type DigestsTotals struct {
	Totals
	ShardsPlanned               int                    `json:"shards_planned"`
	ShardsProduced              int                    `json:"shards_produced"`
	MissingShards               []string               `json:"missing_shards"`
	UnexpectedShards            []string               `json:"unexpected_shards"`
	BytesByRole                 map[string]RoleFigures `json:"bytes_by_role"`
	QuantisedBytesByType        map[string]RoleFigures `json:"quantised_bytes_by_type"`
	OutputBytesFromShardDigests int64                  `json:"output_bytes_from_manifests"`
}

// SourceInfo names the source in manifest.json.
type SourceInfo struct {
	Repo     string `json:"repo"`
	Revision string `json:"revision"`
	Tensors  int    `json:"tensors"`
}

// DigestsDoc is q2/manifest.json: every shard's digests summed up against
// the plan, and the digests of the external tensors.
type DigestsDoc struct {
	Artifact            string            `json:"artifact"`
	Source              SourceInfo        `json:"source"`
	Recipe              map[string]Recipe `json:"recipe"`
	Importance          Importance        `json:"importance"`
	Quantiser           string            `json:"quantiser"`
	Totals              DigestsTotals     `json:"totals"`
	Environment         map[string]string `json:"environment"`
	ExternalNative      []SourceRef       `json:"external_native"`
	DroppedExpertScales int               `json:"dropped_expert_scales"`
	Shards              []DigestsShard    `json:"shards"`
}

func recipe() map[string]Recipe {
	r := func(t *GGMLType) Recipe { return Recipe{t.Name, t.BitsPerWeight, t.Importance} }
	return map[string]Recipe{"w1": r(typeOf("w1")), "w2": r(typeOf("w2")), "w3": r(typeOf("w3"))}
}

func importance() Importance {
	return Importance{
		Calibration: "none: no activations were collected and no importance matrix was consumed",
		IQ2XXS:      "a constant unit importance vector (1.0 per column): ggml's quantize_row_iq2_xxs_impl",
		Q2K:         "none: ggml's reference path quantize_row_q2_K_ref",
	}
}

// title names the model in the documents: the repository, else what
// config.json calls the model and the source directory it was read from
// (a checkpoint outside a Hugging Face cache has no repository name).
func (q *Plan) title() string {
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

// source names what q2/ derives from, for README.md: the repository and
// revision, or a local checkpoint by its directory's name (and the
// revision given, if any) when it is not a Hugging Face cache snapshot.
func (q *Plan) source() string {
	if q.Repo != "unknown" {
		return fmt.Sprintf("`%s` revision `%s`", q.Repo, q.Revision)
	}
	s := fmt.Sprintf("a local checkpoint (`%s`)", filepath.Base(q.cat.Dir))
	if q.Revision != "unknown" {
		s += fmt.Sprintf(" at revision `%s`", q.Revision)
	}
	return s
}

func (q *Plan) artifact() string { return q.title() + " mixed-Q2 routed experts" }

func sourceRange(t *checkpoint.Tensor) [2]int64 { return [2]int64{t.Offset, t.Offset + t.Size} }

func sourceRef(t *checkpoint.Tensor, role string) SourceRef {
	return SourceRef{Name: t.Name, Role: role, SourceShard: t.Shard.Name, SourceRange: sourceRange(t),
		DType: string(t.DType), Shape: t.Shape, Bytes: t.Size}
}

// WritePlan writes plan.json: the full tensor map, from the headers. It
// streams the document (tens of megabytes for a full checkpoint) rather
// than building its text.
func (q *Plan) WritePlan(w io.Writer) error { return vfile.WriteJSON(w, q.planDoc()) }

// planDoc is plan.json.
func (q *Plan) planDoc() *PlanDoc {
	p := &PlanDoc{
		Artifact: q.artifact(), DSFSVersion: build.Version(), CodecVersion: codecs.Version, Quantiser: Quantiser,
		SourceRepo: q.Repo, SourceRevision: q.Revision, Recipe: recipe(), Importance: importance(), Totals: q.totals(),
		Shards:   make([]PlanShard, 0, len(q.Shards)),
		External: make([]SourceRef, 0, len(q.External)), Dropped: make([]SourceRef, 0, len(q.Dropped)),
		Skipped: append([]Skip{}, q.Skipped...),
	}
	for _, sh := range q.Shards {
		ps := PlanShard{OutputShard: sh.Name, SourceShard: sh.Source.Name, FileBytes: sh.File.Size(),
			HeaderBytes: int64(len(sh.Header()))}
		if len(sh.Tensors) > 0 { // an empty list stays null, as the plan has always written it
			ps.Tensors = make([]PlanTensor, 0, len(sh.Tensors))
		}
		for _, t := range sh.Tensors {
			pt := PlanTensor{Name: t.Name, Role: t.Role, SourceShard: t.Source.Shard.Name, SourceRange: sourceRange(t.Source),
				SourceDType: string(t.Source.DType), SourceShape: t.Source.Shape, OutputShard: sh.Name,
				OutputOffset: t.Offset, OutputBytes: t.Size, OutputDType: string(t.DType), OutputShape: t.Shape}
			if t.Type != nil {
				pt.GGMLType = t.Type.Name
				pt.LogicalShape = []int64{t.Rows(), t.In()}
				pt.BlocksPerRow = t.In() / int64(t.Type.BlockWeights)
				pt.BytesPerRow = t.RowBytes()
			}
			ps.Tensors = append(ps.Tensors, pt)
		}
		p.Shards = append(p.Shards, ps)
	}
	for _, t := range q.External {
		p.External = append(p.External, sourceRef(t, RoleExternal))
	}
	for _, t := range q.Dropped {
		p.Dropped = append(p.Dropped, sourceRef(t, RoleDropped))
	}
	return p
}

// totals are plan.json's figures.
func (q *Plan) totals() Totals {
	tt := Totals{SourceTensors: len(q.cat.Tensors), Shards: len(q.Shards), SkippedTensors: len(q.Skipped)}
	for _, t := range q.cat.Tensors {
		tt.SourceBytes += t.Size
	}
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			tt.OutputTensors++
			tt.OutputBytes += t.Size
			if t.Type != nil {
				tt.QuantisedTensors++
				tt.QuantisedBytes += t.Size
				tt.QuantisedLogicalWeights += t.Rows() * t.In()
				tt.QuantisedSourceBytes += t.Source.Size + t.Source.Scale.Size
			} else {
				tt.NativeTensors++
				tt.NativeBytes += t.Size
			}
		}
		tt.FileBytes += sh.File.Size()
	}
	for _, t := range q.External {
		tt.ExternalTensors++
		tt.ExternalBytes += t.Size
	}
	for _, t := range q.Dropped {
		tt.DroppedTensors++
		tt.DroppedBytes += t.Size
	}
	return tt
}

// shardDigests computes a shard's digests: the source digest of every
// tensor it holds or drops, and the output digest of every tensor (a
// native tensor's is its source digest; a quantised one's needs all its
// blocks). The finished document is kept in the disk cache under a key
// made of the layout and the source digests.
func (q *Plan) shardDigests(ctx context.Context, sh *Shard) ([]byte, error) {
	m := ShardDigests{OutputShard: sh.Name, SourceShard: sh.Source.Name, FileBytes: sh.File.Size(),
		CodecVersion: codecs.Version, Tensors: make([]TensorDigest, len(sh.Tensors)),
		Dropped: make([]SourceDigest, len(sh.Dropped))}
	sources := make([]*checkpoint.Tensor, 0, len(sh.Tensors)+len(sh.Dropped))
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
		// The text is FORMATS.md's; another would orphan every stored entry.
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
		m.Tensors[i] = TensorDigest{Name: t.Name, OutputDType: string(t.DType), OutputShape: t.Shape,
			OutputBytes: t.Size, OutputSHA256: digests[i], SourceSHA256: digests[i]}
		if t.Type != nil {
			m.Tensors[i].GGMLType = t.Type.Name
		}
	}
	for i, t := range sh.Dropped {
		m.Dropped[i] = SourceDigest{Name: t.Name, SourceSHA256: digests[len(sh.Tensors)+i]}
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
	b := vfile.MustJSON(m)
	if q.disk != nil {
		q.disk.Put(key, b) // a failed write costs a recomputation next time, no more
	}
	return b, nil
}

// ShardDigests returns the digests of output shard sh, computing them on
// first use.
func (q *Plan) ShardDigests(ctx context.Context, sh *Shard) (*ShardDigests, error) {
	b, err := sh.Digests.Bytes(ctx)
	if err != nil {
		return nil, err
	}
	var m ShardDigests
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s.manifest.json: %w", sh.Name, err)
	}
	return &m, nil
}

// Digests returns manifest.json: the seed's aggregation over every shard's
// digests (which it computes, quantising every shard not yet done) plus
// the digests of the external Engram tables.
func (q *Plan) Digests(ctx context.Context) (*DigestsDoc, error) {
	plan := q.planDoc()
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
	m := &DigestsDoc{
		Artifact: plan.Artifact,
		Source:   SourceInfo{Repo: q.Repo, Revision: q.Revision, Tensors: plan.Totals.SourceTensors},
		Recipe:   plan.Recipe, Importance: plan.Importance, Quantiser: Quantiser,
		Totals: DigestsTotals{Totals: plan.Totals, ShardsPlanned: len(plan.Shards),
			MissingShards: []string{}, UnexpectedShards: []string{},
			BytesByRole: map[string]RoleFigures{}, QuantisedBytesByType: map[string]RoleFigures{}},
		Environment:         environment(),
		ExternalNative:      plan.External,
		DroppedExpertScales: len(plan.Dropped),
		Shards:              []DigestsShard{},
	}
	for _, sh := range q.Shards {
		sm, err := q.ShardDigests(ctx, sh)
		if err != nil {
			return nil, err
		}
		tensors := append([]TensorDigest(nil), sm.Tensors...)
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
			if r == RoleQuantised {
				f := m.Totals.QuantisedBytesByType[ggml[t.Name]]
				f.Tensors++
				f.Bytes += t.OutputBytes
				m.Totals.QuantisedBytesByType[ggml[t.Name]] = f
			}
			data += t.OutputBytes
			h.Write([]byte(t.Name))
			h.Write([]byte(t.OutputSHA256))
		}
		m.Totals.OutputBytesFromShardDigests += data
		m.Totals.ShardsProduced++
		m.Shards = append(m.Shards, DigestsShard{OutputShard: sm.OutputShard, SourceShard: sm.SourceShard,
			Tensors: len(sm.Tensors), FileBytes: sm.FileBytes, DataBytes: data,
			DigestOfShardDigests: fmt.Sprintf("%x", h.Sum(nil))})
	}
	m.ExternalNative = append([]SourceRef(nil), plan.External...)
	err := hashAll(ctx, len(q.External), func(ctx context.Context, i int) (err error) {
		m.ExternalNative[i].SHA256, err = sha256Tensor(ctx, q.External[i])
		return err
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// environment is what the documents record of the machine. The bytes do
// not depend on it (see README.md "Reproducibility").
func environment() map[string]string {
	return map[string]string{
		"dsfs":      build.Version(),
		"codec":     codecs.Version,
		"go":        runtime.Version(),
		"platform":  runtime.GOOS + "/" + runtime.GOARCH,
		"quantiser": Quantiser,
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

// readmeTemplate is README.md, filled from a readmeFigures.
//
//go:embed README.md.tmpl
var readmeText string

var readmeTemplate = template.Must(template.New("README.md").Funcs(template.FuncMap{
	"commas": func(n any) string { return commas(reflect.ValueOf(n).Int()) },
	"gb":     humanGB,
}).Parse(readmeText))

// readmeFigures are what README.md says of a plan.
type readmeFigures struct {
	Title, Revision, DSFS, Quantiser string
	Source                           string // what the view derives from, for prose
	Layers, Experts                  int    // of the quantised matrices
	GateUp, Down                     typeFigures
	Geometries                       []geometry
	T                                Totals // plan.json's
	AverageBits                      float64
	Roles                            []roleFigures
	DTypes                           string // of the tensors copied unchanged
	MTP                              int    // MTP expert tensors copied unchanged
	External                         string // the Engram tables, for prose
	Shards                           []readmeShard
	Environment                      map[string]string
}

// readmeShard is one output shard's line of README.md.
type readmeShard struct {
	OutputShard, SourceShard string
	Tensors                  int
	FileBytes                int64
}

// typeFigures are the quantised tensors of one ggml type.
type typeFigures struct {
	*GGMLType
	Tensors int
	Weights int64
}

// geometry is one row shape of the quantised tensors, and the projections
// that have it.
type geometry struct {
	Names            string
	Type             string
	Out, In          int64
	Blocks, RowBytes int64
}

// roleFigures are the output tensors of one role.
type roleFigures struct {
	Name    string
	Tensors int
	Bytes   int64
}

// README returns README.md: the seed's template filled with this
// checkpoint's figures, all taken from the plan.
func (q *Plan) README() []byte {
	var b bytes.Buffer
	if err := readmeTemplate.Execute(&b, q.readmeFigures()); err != nil {
		panic(err) // the template and its figures are fixed: a bug, not input
	}
	return b.Bytes()
}

// readmeFigures gathers README.md's figures from the plan, without
// building plan.json's tensor list.
func (q *Plan) readmeFigures() readmeFigures {
	f := readmeFigures{Title: q.title(), Source: q.source(), Revision: q.Revision, DSFS: build.Version(), Quantiser: Quantiser,
		GateUp: typeFigures{GGMLType: IQ2XXS}, Down: typeFigures{GGMLType: Q2K},
		T: q.totals(), Environment: environment()}
	for _, sh := range q.Shards {
		f.Shards = append(f.Shards, readmeShard{OutputShard: sh.Name, SourceShard: sh.Source.Name,
			Tensors: len(sh.Tensors), FileBytes: sh.File.Size()})
	}
	byType := map[string]*typeFigures{IQ2XXS.Name: &f.GateUp, Q2K.Name: &f.Down}
	type shape struct {
		typ     *GGMLType
		out, in int64
	}
	projs := make(map[shape]map[string]bool)
	layers, experts := make(map[int]bool), make(map[int]bool)
	roles := make(map[string]*roleFigures)
	dtypes := make(map[string]bool)
	for _, sh := range q.Shards {
		for _, t := range sh.Tensors {
			r := roles[t.Role]
			if r == nil {
				r = &roleFigures{Name: t.Role}
				roles[t.Role] = r
			}
			r.Tensors++
			r.Bytes += t.Size
			if t.Type == nil {
				dtypes[string(t.DType)] = true
				if t.Source.Role == checkpoint.RoleMTPExpert {
					f.MTP++
				}
				continue
			}
			tf := byType[t.Type.Name]
			tf.Tensors++
			tf.Weights += t.Rows() * t.In()
			g := shape{t.Type, t.Rows(), t.In()}
			if projs[g] == nil {
				projs[g] = make(map[string]bool)
			}
			projs[g][t.Source.Proj] = true
			layers[t.Source.Layer] = true
			experts[t.Source.Expert] = true
		}
	}
	f.Layers, f.Experts = len(layers), len(experts)
	for g, ps := range projs {
		var names []string
		for p := range ps {
			names = append(names, "`"+p+".weight`")
		}
		sort.Strings(names)
		blocks := g.in / int64(g.typ.BlockWeights)
		f.Geometries = append(f.Geometries, geometry{Names: strings.Join(names, ", "), Type: g.typ.Name,
			Out: g.out, In: g.in, Blocks: blocks, RowBytes: blocks * int64(g.typ.BlockBytes)})
	}
	sort.Slice(f.Geometries, func(i, j int) bool {
		a, c := f.Geometries[i], f.Geometries[j]
		if a.Type != c.Type {
			return a.Type < c.Type
		}
		if a.Out != c.Out {
			return a.Out < c.Out
		}
		return a.In < c.In
	})
	if tt := f.T; tt.QuantisedLogicalWeights > 0 {
		f.AverageBits = math.Round(8*float64(tt.QuantisedBytes)/float64(tt.QuantisedLogicalWeights)*1e4) / 1e4
	}
	for _, r := range roles {
		f.Roles = append(f.Roles, *r)
	}
	sort.Slice(f.Roles, func(i, j int) bool { return f.Roles[i].Name < f.Roles[j].Name })
	dt := make([]string, 0, len(dtypes))
	for d := range dtypes {
		dt = append(dt, "`"+d+"`")
	}
	sort.Strings(dt)
	f.DTypes = strings.Join(dt, ", ")
	var ext []string
	for _, t := range q.External {
		if t.ScaleOf == nil {
			ext = append(ext, "`"+strings.TrimSuffix(t.Name, path.Ext(t.Name))+".*`")
		}
	}
	f.External = listOrNone(ext)
	return f
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
