package check

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/safetensors"
)

// TraceResult summarises a check of trace/.
type TraceResult struct {
	Prompts, Tokens int
	MoELayers       int   // layers config.json routes through experts
	Routes          int64 // token routes checked: tokens × MoE layers
	TopK            int   // experts per token
	// Rule is how config.json's router weighs the chosen experts, and
	// WorstSum, where the rule fixes the weights' sum, the largest
	// relative distance of a token's sum from it.
	Rule       string
	WorstSum   float64
	HashRoutes int64 // routes of hash layers checked against their tid2eid table
	Values     int64 // activation and logit values checked finite
	Files      int   // files of trace/ read twice
	Bytes      int64 // their bytes
}

// Trace checks the trace/ view at dir against the checkpoint at srcDir,
// from the files alone: prompts.json holds the prompts named by want (in
// order; its own when want is nil); for every layer config.json routes
// through experts, the layer's record (layers/NN.json) routes every token
// of every prompt to num_experts_per_tok distinct experts with the
// weights the config's scoring function gives (positive, and summing to
// what its normalisation fixes), layers/NN.safetensors holds the same
// routes, and a hash-routed layer's experts are its tid2eid row of the
// token; every F32 value of every safetensors file is finite; and every
// file reads the same bytes a second time, past the page cache. A
// trace/ with an ERROR.txt fails: it does not run everything. The
// router's logits are not served, so the weights are checked against
// what the scoring function guarantees, not recomputed.
func Trace(srcDir, dir string, want []string) (TraceResult, error) {
	var r TraceResult
	if why, err := Unserved(dir); err != nil || why != "" {
		if err == nil {
			err = fmt.Errorf("trace/ERROR.txt: %s", why)
		}
		return r, err
	}
	cat, err := checkpoint.Open(srcDir)
	if err != nil {
		return r, err
	}
	defer cat.Close()
	rc, err := newRouterConfig(cat.Config)
	if err != nil {
		return r, err
	}
	r.TopK, r.Rule = rc.topK, rc.describe()

	// First read: every file whole, its SHA-256, what the checks need.
	var files []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		return r, err
	}
	sums := make(map[string][32]byte, len(files))
	records := make(map[int][]byte)
	tensors := make(map[int]*tensorFile)
	var promptsJSON []byte
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			return r, err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		sums[p] = sha256.Sum256(b)
		r.Files++
		r.Bytes += int64(len(b))
		var layer int
		switch {
		case rel == "prompts.json":
			promptsJSON = b
		case path.Ext(rel) == ".safetensors":
			tf, err := parseTensors(b)
			if err != nil {
				return r, fmt.Errorf("trace/%s: %w", rel, err)
			}
			n, err := tf.finite()
			if err != nil {
				return r, fmt.Errorf("trace/%s: %w", rel, err)
			}
			r.Values += n
			if _, err := fmt.Sscanf(rel, "layers/%d.safetensors", &layer); err == nil {
				tensors[layer] = tf
			}
		default:
			if _, err := fmt.Sscanf(rel, "layers/%d.json", &layer); err == nil {
				records[layer] = b
			}
		}
	}

	prompts, err := readPrompts(promptsJSON, want)
	if err != nil {
		return r, err
	}
	r.Prompts = len(prompts)
	for _, q := range prompts {
		r.Tokens += len(q.TokenIDs)
	}
	for l := range rc.layers {
		if !rc.moe(l) {
			continue
		}
		r.MoELayers++
		var tid2eid *checkpoint.Tensor
		if l < rc.hashLayers {
			name := fmt.Sprintf("layers.%d.ffn.gate.tid2eid", l)
			if tid2eid = cat.Tensor(name); tid2eid == nil {
				return r, fmt.Errorf("%s: tensor %s missing; config.json says layer %d routes by token id", srcDir, name, l)
			}
		}
		lc := layerCheck{rc: rc, layer: l, tid2eid: tid2eid, tensors: tensors[l], res: &r}
		if err := lc.run(records[l], prompts); err != nil {
			return r, err
		}
	}

	// Second read, past the page cache.
	for _, p := range files {
		sum, err := readUncached(p)
		if err != nil {
			return r, err
		}
		if sum != sums[p] {
			rel, _ := filepath.Rel(dir, p)
			return r, fmt.Errorf("trace/%s: a second read gives other bytes", filepath.ToSlash(rel))
		}
	}
	return r, nil
}

// readUncached drops the page cache of the file at p and reads it again,
// returning its SHA-256.
func readUncached(p string) ([32]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return [32]byte{}, err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return [32]byte{}, fmt.Errorf("%s: dropping its cached pages: %w", p, err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return [32]byte{}, fmt.Errorf("%s: %w", p, err)
	}
	return [32]byte(h.Sum(nil)), nil
}

// tracePrompt is an entry of prompts.json.
type tracePrompt struct {
	ID       string `json:"id"`
	TokenIDs []int  `json:"token_ids"`
}

func readPrompts(b []byte, want []string) ([]tracePrompt, error) {
	if b == nil {
		return nil, errors.New("trace/prompts.json: missing")
	}
	var prompts []tracePrompt
	if err := json.Unmarshal(b, &prompts); err != nil {
		return nil, fmt.Errorf("trace/prompts.json: %w", err)
	}
	var ids []string
	for _, q := range prompts {
		if len(q.TokenIDs) == 0 {
			return nil, fmt.Errorf("trace/prompts.json: prompt %s has no tokens", q.ID)
		}
		ids = append(ids, q.ID)
	}
	if len(ids) == 0 || want != nil && !slices.Equal(ids, want) {
		return nil, fmt.Errorf("trace/prompts.json: prompts %q, want %q", ids, want)
	}
	return prompts, nil
}

// routerConfig is what config.json says of the routers.
type routerConfig struct {
	family                checkpoint.Family
	layers, experts, topK int
	scoring               string
	normTopK              bool
	scale                 float64
	firstDense, freq      int
	hashLayers            int
	grouped               bool // top-k within the best groups only
}

// newRouterConfig reads the router settings of config.json (text_config
// first), with the defaults of DeepSeek's Hugging Face configurations.
func newRouterConfig(c *checkpoint.Config) (routerConfig, error) {
	rc := routerConfig{family: c.Family, layers: c.NumLayers, experts: c.RoutedExperts,
		scoring: "softmax", scale: 1, freq: 1}
	scopes := []map[string]any{c.Raw}
	if tc, ok := c.Raw["text_config"].(map[string]any); ok {
		scopes = []map[string]any{tc, c.Raw}
	}
	find := func(key string) any {
		for _, s := range scopes {
			if v, ok := s[key]; ok && v != nil {
				return v
			}
		}
		return nil
	}
	var errs []error
	num := func(key string, dst *float64) {
		switch v := find(key).(type) {
		case nil:
		case json.Number:
			f, err := v.Float64()
			if err != nil {
				errs = append(errs, fmt.Errorf("config.json: %s: %w", key, err))
			}
			*dst = f
		default:
			errs = append(errs, fmt.Errorf("config.json: %s is %v, not a number", key, v))
		}
	}
	integer := func(key string, dst *int) {
		f := float64(*dst)
		num(key, &f)
		if f != math.Trunc(f) || f < 0 {
			errs = append(errs, fmt.Errorf("config.json: %s is %v, not a count", key, f))
		}
		*dst = int(f)
	}
	integer("num_experts_per_tok", &rc.topK)
	integer("first_k_dense_replace", &rc.firstDense)
	integer("moe_layer_freq", &rc.freq)
	integer("num_hash_layers", &rc.hashLayers)
	num("routed_scaling_factor", &rc.scale)
	groups := 1
	integer("n_group", &groups)
	rc.grouped = groups > 1
	if s, ok := find("scoring_func").(string); ok {
		rc.scoring = s
	}
	rc.normTopK, _ = find("norm_topk_prob").(bool)
	switch {
	case len(errs) > 0:
		return rc, errors.Join(errs...)
	case rc.layers <= 0 || rc.experts <= 0 || rc.topK <= 0 || rc.topK > rc.experts || rc.freq <= 0:
		return rc, fmt.Errorf("config.json: %d layers, %d routed experts, %d per token, MoE every %d layers: no routes to check", rc.layers, rc.experts, rc.topK, rc.freq)
	}
	return rc, nil
}

// moe reports whether layer l routes through experts: every layer of V4
// and V4.1, and of V2/V3 those from first_k_dense_replace on, every
// moe_layer_freq-th (Hugging Face's DeepseekV2DecoderLayer).
func (rc routerConfig) moe(l int) bool {
	switch rc.family {
	case checkpoint.DeepSeekV4, checkpoint.DeepSeekV41:
		return true
	}
	return l >= rc.firstDense && l%rc.freq == 0
}

// weights says how the router turns the chosen experts' scores into
// weights: divided by their sum or not, then times scale. Each family
// follows its own code: Hugging Face's DeepSeek-V2 gate (normalised
// without scaling when norm_topk_prob and top_k > 1, else scaled), its
// V3 gate (normalised when norm_topk_prob, always scaled), V4.1's model.py
// (as V3, but only for top_k > 1) and V4's model.py (softmax weights
// never normalised, others always; always scaled).
func (rc routerConfig) weights() (norm bool, scale float64) {
	switch rc.family {
	case checkpoint.DeepSeekV2:
		if rc.normTopK && rc.topK > 1 {
			return true, 1
		}
		return false, rc.scale
	case checkpoint.DeepSeekV3:
		return rc.normTopK, rc.scale
	case checkpoint.DeepSeekV41:
		return rc.normTopK && rc.topK > 1, rc.scale
	}
	return rc.scoring != "softmax", rc.scale
}

func (rc routerConfig) describe() string {
	norm, scale := rc.weights()
	if norm {
		return fmt.Sprintf("%s, normalised to %g", rc.scoring, scale)
	}
	return fmt.Sprintf("%s, times %g", rc.scoring, scale)
}

// sumTolerance is how far a normalised token's weights may sum from the
// rule's value: float32 rounding of k terms, with room to spare.
const sumTolerance = 1e-5

// checkWeights checks one token's weights against the rule, returning the
// relative distance of their sum from a fixed one (0 when none is fixed).
func (rc routerConfig) checkWeights(w []float64) (float64, error) {
	var sum float64
	for _, x := range w {
		if !(x > 0) || math.IsInf(x, 0) {
			return 0, fmt.Errorf("weight %v is not a positive number, which %s never gives", x, rc.scoring)
		}
		sum += x
	}
	norm, scale := rc.weights()
	switch {
	case norm:
		d := math.Abs(sum-scale) / scale
		if d > sumTolerance {
			return d, fmt.Errorf("weights sum to %.7g, not the %g normalisation gives", sum, scale)
		}
		return d, nil
	case rc.scoring == "softmax":
		// Probabilities: at most 1 together; the k largest of E at least k/E.
		lo := scale * float64(rc.topK) / float64(rc.experts)
		if sum > scale*(1+sumTolerance) || !rc.grouped && sum < lo*(1-sumTolerance) {
			return 0, fmt.Errorf("weights sum to %.7g, outside [%.7g, %g] of the %d largest of %d softmax probabilities times %g", sum, lo, scale, rc.topK, rc.experts, scale)
		}
	case rc.scoring == "sigmoid":
		if m := slices.Max(w); m >= scale {
			return 0, fmt.Errorf("weight %.7g is not below %g, the sigmoid's bound times routed_scaling_factor", m, scale)
		}
	}
	return 0, nil
}

// layerCheck checks one MoE layer's routes.
type layerCheck struct {
	rc      routerConfig
	layer   int
	tid2eid *checkpoint.Tensor // set for a hash-routed layer
	tensors *tensorFile
	res     *TraceResult
}

// layerRouting is what a layer record says of its routes.
type layerRouting struct {
	Routing *struct {
		PerPrompt []promptRoutes `json:"per_prompt"`
	} `json:"routing"`
}

type promptRoutes struct {
	ID          string       `json:"id"`
	TokenRoutes []tokenRoute `json:"token_routes"`
}

type tokenRoute struct {
	Position int            `json:"position"`
	TokenID  int            `json:"token_id"`
	Experts  []expertWeight `json:"experts_by_weight"`
}

type expertWeight struct {
	Expert int     `json:"expert"`
	Weight float64 `json:"weight"`
}

func (c *layerCheck) run(record []byte, prompts []tracePrompt) error {
	name := fmt.Sprintf("trace/layers/%02d.json", c.layer)
	if record == nil {
		return fmt.Errorf("%s: missing, and config.json routes layer %d through experts", name, c.layer)
	}
	if c.tensors == nil {
		return fmt.Errorf("trace/layers/%02d.safetensors: missing", c.layer)
	}
	var rec layerRouting
	if err := json.Unmarshal(record, &rec); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if rec.Routing == nil {
		return fmt.Errorf("%s: no routing, and config.json routes layer %d through experts", name, c.layer)
	}
	for _, q := range prompts {
		i := slices.IndexFunc(rec.Routing.PerPrompt, func(p promptRoutes) bool { return p.ID == q.ID })
		if i < 0 {
			return fmt.Errorf("%s: no routes for prompt %s", name, q.ID)
		}
		routes := rec.Routing.PerPrompt[i].TokenRoutes
		if len(routes) != len(q.TokenIDs) {
			return fmt.Errorf("%s: prompt %s: %d token routes for %d tokens", name, q.ID, len(routes), len(q.TokenIDs))
		}
		ids, err := c.tensors.ints(q.ID+".topk_ids", len(routes), c.rc.topK)
		if err != nil {
			return fmt.Errorf("trace/layers/%02d.safetensors: %w", c.layer, err)
		}
		ws, err := c.tensors.floats(q.ID+".topk_weights", len(routes), c.rc.topK)
		if err != nil {
			return fmt.Errorf("trace/layers/%02d.safetensors: %w", c.layer, err)
		}
		for t, tr := range routes {
			where := fmt.Sprintf("%s: prompt %s token %d", name, q.ID, t)
			if tr.Position != t || tr.TokenID != q.TokenIDs[t] {
				return fmt.Errorf("%s: position %d token id %d, prompts.json has id %d there", where, tr.Position, tr.TokenID, q.TokenIDs[t])
			}
			if len(tr.Experts) != c.rc.topK {
				return fmt.Errorf("%s: %d experts, num_experts_per_tok is %d", where, len(tr.Experts), c.rc.topK)
			}
			w := make([]float64, len(tr.Experts))
			for j, e := range tr.Experts {
				if e.Expert < 0 || e.Expert >= c.rc.experts {
					return fmt.Errorf("%s: expert %d of %d", where, e.Expert, c.rc.experts)
				}
				if slices.ContainsFunc(tr.Experts[:j], func(x expertWeight) bool { return x.Expert == e.Expert }) {
					return fmt.Errorf("%s: expert %d chosen twice", where, e.Expert)
				}
				// The tensors hold the same route: each expert once, with
				// the weight's float32.
				k := slices.Index(ids[t], int32(e.Expert))
				if k < 0 || ws[t][k] != float32(e.Weight) {
					return fmt.Errorf("%s: expert %d weight %v, layers/%02d.safetensors has experts %v weights %v", where, e.Expert, e.Weight, c.layer, ids[t], ws[t])
				}
				w[j] = e.Weight
			}
			d, err := c.rc.checkWeights(w)
			if err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			c.res.WorstSum = max(c.res.WorstSum, d)
			if c.tid2eid != nil {
				if err := c.checkHash(q.TokenIDs[t], ids[t]); err != nil {
					return fmt.Errorf("%s: %w", where, err)
				}
				c.res.HashRoutes++
			}
			c.res.Routes++
		}
	}
	return nil
}

// checkHash compares a hash-routed token's experts with its row of the
// source's tid2eid table [vocab, k] (I64 or I32), in order.
func (c *layerCheck) checkHash(token int, ids []int32) error {
	t := c.tid2eid
	size := int64(t.DType.Bits() / 8)
	if len(t.Shape) != 2 || t.Shape[1] != int64(len(ids)) || int64(token) >= t.Shape[0] || size != 4 && size != 8 {
		return fmt.Errorf("%s: %s %v cannot route token %d to %d experts", t.Name, t.DType, t.Shape, token, len(ids))
	}
	row := make([]byte, int64(len(ids))*size)
	if _, err := t.ReadAt(row, int64(token)*int64(len(row))); err != nil {
		return err
	}
	want := make([]int32, len(ids))
	for i := range want {
		if size == 8 {
			want[i] = int32(binary.LittleEndian.Uint64(row[8*i:]))
		} else {
			want[i] = int32(binary.LittleEndian.Uint32(row[4*i:]))
		}
	}
	if !slices.Equal(ids, want) {
		return fmt.Errorf("experts %v, %s row %d says %v", ids, t.Name, token, want)
	}
	return nil
}

// tensorFile is a safetensors file read whole.
type tensorFile struct {
	h    *safetensors.Header
	data []byte
}

func parseTensors(b []byte) (*tensorFile, error) {
	h, err := safetensors.ReadHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	return &tensorFile{h, b[h.DataStart:]}, nil
}

// finite checks that every F32 value is finite and counts them.
func (f *tensorFile) finite() (int64, error) {
	var n int64
	for _, t := range f.h.Tensors {
		if t.DType != safetensors.F32 {
			continue
		}
		b := f.data[t.Begin:t.End]
		for i := 0; i < len(b); i += 4 {
			if v := math.Float32frombits(binary.LittleEndian.Uint32(b[i:])); math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
				return n, fmt.Errorf("%s: value %d is %v", t.Name, i/4, v)
			}
		}
		n += int64(len(b) / 4)
	}
	return n, nil
}

// tensor returns the bytes of the named tensor, checking its type and
// shape [rows, cols].
func (f *tensorFile) tensor(name string, dt safetensors.DType, rows, cols int) ([]byte, error) {
	t, ok := f.h.Find(name)
	if !ok {
		return nil, fmt.Errorf("tensor %s missing", name)
	}
	if t.DType != dt || !slices.Equal(t.Shape, []int64{int64(rows), int64(cols)}) {
		return nil, fmt.Errorf("tensor %s: %s %v, want %s [%d %d]", name, t.DType, t.Shape, dt, rows, cols)
	}
	return f.data[t.Begin:t.End], nil
}

// ints returns an I32 tensor [rows, cols] by row.
func (f *tensorFile) ints(name string, rows, cols int) ([][]int32, error) {
	b, err := f.tensor(name, safetensors.I32, rows, cols)
	if err != nil {
		return nil, err
	}
	out := make([][]int32, rows)
	for r := range out {
		out[r] = make([]int32, cols)
		for c := range out[r] {
			out[r][c] = int32(binary.LittleEndian.Uint32(b[4*(r*cols+c):]))
		}
	}
	return out, nil
}

// floats returns an F32 tensor [rows, cols] by row.
func (f *tensorFile) floats(name string, rows, cols int) ([][]float32, error) {
	b, err := f.tensor(name, safetensors.F32, rows, cols)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, rows)
	for r := range out {
		out[r] = make([]float32, cols)
		for c := range out[r] {
			out[r][c] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*(r*cols+c):]))
		}
	}
	return out, nil
}
