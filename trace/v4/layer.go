package v4

import "context"

// hcWeights are one hyper-connection site's decoded weights.
type hcWeights struct {
	fn          *linear
	base, scale []float32
}

// compressorWeights are a Compressor's decoded weights.
type compressorWeights struct {
	ape        []float32 // [ratio, coff·hd]
	wkv, wgate *linear   // [coff·hd, D]
	norm       []float32 // [hd]
	ratio, hd  int
}

// layerWeights are one layer's decoded weights, routed experts excepted:
// those are read when a token selects them.
type layerWeights struct {
	t                 *layerTensors
	bytes             int64 // checkpoint bytes read
	attnNorm, ffnNorm []float32
	hcAttn, hcFFN     hcWeights
	sink              []float32
	wqA, wqB, wkv     *linear
	qNorm, kvNorm     []float32
	woA, woB          *linear
	compressor        *compressorWeights
	idxWqB            *linear
	idxWeights        *linear
	idxCompressor     *compressorWeights
	gate              *linear
	bias              []float32
	tid2eid           []int32
	shared            [3]*linear
	rope              *rope
}

// loader decodes tensors, keeping the first error and counting the
// checkpoint bytes read (scales included).
type loader struct {
	ctx   context.Context
	err   error
	bytes int64
	arena *arena // where FP8 and MXFP4 codes are read; nil: new buffers
}

func (ld *loader) count(r *tensorRef) {
	ld.bytes += r.t.Size
	if r.t.Scale != nil {
		ld.bytes += r.t.Scale.Size
	}
}

// stop reports whether nothing more is to be read: an earlier error, or
// the context done (a layer's weights are gigabytes to read).
func (ld *loader) stop() bool {
	if ld.err == nil && ld.ctx != nil {
		ld.err = ld.ctx.Err()
	}
	return ld.err != nil
}

func (ld *loader) lin(r *tensorRef) *linear {
	if r == nil || ld.stop() {
		return nil
	}
	ld.count(r)
	w, err := load(r, ld.arena)
	ld.err = err
	return w
}

func (ld *loader) vec(r *tensorRef) []float32 {
	if r == nil || ld.stop() {
		return nil
	}
	ld.count(r)
	v, err := r.floats()
	ld.err = err
	return v
}

func (ld *loader) hc(t hcTensors) hcWeights {
	return hcWeights{fn: ld.lin(t.fn), base: ld.vec(t.base), scale: ld.vec(t.scale)}
}

func (ld *loader) compressor(t *compressorTensors, ratio, hd int) *compressorWeights {
	if t == nil {
		return nil
	}
	return &compressorWeights{ape: ld.vec(t.ape), wkv: ld.lin(t.wkv), wgate: ld.lin(t.wgate), norm: ld.vec(t.norm), ratio: ratio, hd: hd}
}

// attention loads what every V4-family layer holds of t into w: its
// norms, hyper-connections and attention projections.
func (ld *loader) attention(w *layerWeights, t *layerTensors) {
	w.t = t
	w.attnNorm, w.ffnNorm = ld.vec(t.attnNorm), ld.vec(t.ffnNorm)
	w.hcAttn, w.hcFFN = ld.hc(t.hcAttn), ld.hc(t.hcFFN)
	w.sink = ld.vec(t.sink)
	w.wqA, w.wqB, w.wkv = ld.lin(t.wqA), ld.lin(t.wqB), ld.lin(t.wkv)
	w.qNorm, w.kvNorm = ld.vec(t.qNorm), ld.vec(t.kvNorm)
	// convert.py dequantises wo_a to BF16 and model.py multiplies it
	// unquantised (a plain einsum), so it never counts as quantised.
	w.woA = ld.lin(t.woA)
	if w.woA != nil {
		w.woA.w, w.woA.h, w.woA.c = w.woA.floats(), nil, nil
		bf16Round(w.woA.w)
		w.woA.quant = false
	}
	w.woB = ld.lin(t.woB)
}

// loadLayer decodes layer l's weights, stopping when ctx is done.
func (m *Model) loadLayer(ctx context.Context, l int) (*layerWeights, error) {
	cfg, t := m.Config, m.layers[l]
	ld := &loader{ctx: ctx}
	w := &layerWeights{}
	ld.attention(w, t)
	r := cfg.Ratio(l)
	w.compressor = ld.compressor(t.compressor, r, cfg.HeadDim)
	w.idxWqB, w.idxWeights = ld.lin(t.idxWqB), ld.lin(t.idxWeights)
	w.idxCompressor = ld.compressor(t.idxCompressor, r, cfg.IndexDim)
	w.gate = ld.lin(t.gate)
	w.bias = ld.vec(t.bias)
	if ld.err == nil && t.tid2eid != nil {
		ld.count(t.tid2eid)
		w.tid2eid, ld.err = t.tid2eid.ids(cfg.RoutedExperts)
	}
	for i := range w.shared {
		w.shared[i] = ld.lin(t.shared[i])
	}
	w.bytes = ld.bytes
	return w, ld.err
}
