package trace

import (
	"slices"

	"github.com/dsfs/dsfs/tokenizer"
	"github.com/dsfs/dsfs/trace/deepseek2"
)

// LayerRecord is layers/NN.json: the seed's per-layer record, for a layer
// run on the CPU or a device by this engine.
type LayerRecord struct {
	Layer int    `json:"layer"`
	FFN   string `json:"ffn"` // dense or moe
	// The layer's tensors in the checkpoint.
	StateTensors int   `json:"state_tensors"`
	StateNumel   int64 `json:"state_numel"`
	StateBytes   int64 `json:"state_bytes"`
	// WeightBytesRead is what the forward read: routed experts only where
	// a token selected them.
	WeightBytesRead  int64       `json:"weight_bytes_read"`
	RoutedExpertsRun *int        `json:"routed_experts_run,omitempty"`
	TimingMS         LayerTiming `json:"timing_ms"`
	// PeakDeviceAllocatedMiB is null on the CPU backend.
	PeakDeviceAllocatedMiB *Num          `json:"peak_device_allocated_mib"`
	HiddenBefore           HiddenStats   `json:"hidden_before"`
	HiddenAfter            HiddenStats   `json:"hidden_after"`
	MLA                    MLAStats      `json:"mla"`
	Routing                *RoutingTrace `json:"routing,omitempty"`
}

// LayerTiming is where a layer's time went, in the seed's terms.
type LayerTiming struct {
	LoadCPU Num `json:"load_cpu"` // reading and decoding weights on the host
	// TransferToDevice is null on the CPU backend.
	TransferToDevice *Num `json:"transfer_to_device"`
	Forward          Num  `json:"forward"` // the whole forward, loading included
}

// MLAStats describes the attention's compressed KV path.
type MLAStats struct {
	// kv_a_proj_with_mqa's raw output [tokens, kv_lora + rope] and its
	// two parts before kv_a_layernorm and RoPE.
	CompressedProjectionShape []int `json:"compressed_projection_shape"`
	LatentShape               []int `json:"latent_shape"`
	RopeKeyShape              []int `json:"rope_key_shape"`
	LatentRMS                 Num   `json:"latent_rms"`
	RopeKeyRMS                Num   `json:"rope_key_rms"`
	// The latent cache MLA keeps per token (normalised latent + rotated
	// key), against the expanded per-head K/V that HF's eager attention
	// keeps ([tokens, heads, dim]), at the checkpoint's BF16 width.
	LatentCacheShape     []int `json:"latent_cache_shape"`
	LatentCacheBytes     int64 `json:"latent_cache_bytes"`
	EagerKeyCacheShape   []int `json:"eager_key_cache_shape"`
	EagerValueCacheShape []int `json:"eager_value_cache_shape"`
	EagerCacheBytes      int64 `json:"eager_cache_bytes"`
}

// cacheDTypeBytes is the width of a cached value in the accounting: BF16,
// the activation type of the released models.
const cacheDTypeBytes = 2

// RoutingTrace is the seed's route_trace.
type RoutingTrace struct {
	AggregateLoad     []int          `json:"aggregate_load"`
	AggregateMetrics  LoadMetrics    `json:"aggregate_metrics"`
	TopExperts        []ExpertRoutes `json:"top_experts"`
	SelectedWeightSum Spread         `json:"selected_weight_sum"`
	Top1Top2Margin    *Spread        `json:"top1_top2_margin"` // null with one expert per token
	// RouteMargin is how far decisions are from a tie, in selection score
	// (see model.Routes.Margin).
	RouteMargin Spread          `json:"route_margin"`
	PerPrompt   []PromptRouting `json:"per_prompt"`
	PairJaccard []PairJaccard   `json:"prompt_pair_jaccard"`
}

// ExpertRoutes is an expert with the number of routes it took.
type ExpertRoutes struct {
	Expert int `json:"expert"`
	Routes int `json:"routes"`
}

// PromptRouting is the routing of one prompt.
type PromptRouting struct {
	ID          string         `json:"id"`
	Label       string         `json:"label"`
	Tokens      int            `json:"tokens"`
	Load        []int          `json:"load"`
	Metrics     LoadMetrics    `json:"metrics"`
	TopExperts  []ExpertRoutes `json:"top_experts"`
	TokenRoutes []TokenRoute   `json:"token_routes"`
}

// TokenRoute is one token's experts.
type TokenRoute struct {
	Position int `json:"position"`
	TokenID  int `json:"token_id"`
	// Token and DecodedPiece are null without a tokenizer.
	Token             *string        `json:"token"`
	DecodedPiece      *string        `json:"decoded_piece"`
	ExpertsByWeight   []ExpertWeight `json:"experts_by_weight"`
	SelectedWeightSum Num            `json:"selected_weight_sum"`
	Top1Top2Margin    *Num           `json:"top1_top2_margin"`
	RouteMargin       Num            `json:"route_margin"`
}

// ExpertWeight is a selected expert with its combine weight.
type ExpertWeight struct {
	Expert int `json:"expert"`
	Weight Num `json:"weight"`
}

// PairJaccard compares the experts two prompts used.
type PairJaccard struct {
	Left    string `json:"left"`
	Right   string `json:"right"`
	Jaccard Num    `json:"used_expert_jaccard"` // null when neither used any
	Shared  int    `json:"shared_experts"`
	Union   int    `json:"union_experts"`
}

// record builds layer l's record from its input and output.
func (t *Tracer) record(l int, in []float32, out *deepseek2.Output) *LayerRecord {
	cfg := t.model.Config
	d := cfg.Hidden
	tensors, numel, bytes := t.model.LayerTensors(l)
	r := &LayerRecord{
		Layer:           l,
		FFN:             "dense",
		StateTensors:    tensors,
		StateNumel:      numel,
		StateBytes:      bytes,
		WeightBytesRead: out.WeightBytes,
		TimingMS: LayerTiming{
			LoadCPU: Num(out.LoadTime.Seconds() * 1000),
			Forward: Num(out.Time.Seconds() * 1000),
		},
		HiddenBefore: hiddenStats(in, d),
		HiddenAfter:  hiddenStats(out.HiddenOut, d),
	}
	n := out.Tokens
	kvl, rope := cfg.KVLoRA, cfg.QKRope
	r.MLA = MLAStats{
		CompressedProjectionShape: []int{n, kvl + rope},
		LatentShape:               []int{n, kvl},
		RopeKeyShape:              []int{n, rope},
		LatentRMS:                 rms(out.KVA, kvl+rope, 0, kvl),
		RopeKeyRMS:                rms(out.KVA, kvl+rope, kvl, rope),
		LatentCacheShape:          []int{n, kvl + rope},
		LatentCacheBytes:          int64(n) * int64(kvl+rope) * cacheDTypeBytes,
		EagerKeyCacheShape:        []int{n, cfg.Heads, cfg.QKHead()},
		EagerValueCacheShape:      []int{n, cfg.Heads, cfg.VHead},
		EagerCacheBytes:           int64(n) * int64(cfg.Heads*(cfg.QKHead()+cfg.VHead)) * cacheDTypeBytes,
	}
	if out.Routes != nil {
		r.FFN = "moe"
		run := out.ExpertsRun
		r.RoutedExpertsRun = &run
		r.Routing = t.routing(out.Routes)
	}
	return r
}

// routing builds the seed's route trace from the routes of every prompt.
func (t *Tracer) routing(rt *deepseek2.Routes) *RoutingTrace {
	return routingTrace(t.prompts, t.tok, t.model.Config.RoutedExperts, rt)
}

// routingTrace builds the route trace of prompts' routes rt over e
// experts; tz may be nil.
func routingTrace(prompts []Prompt, tz *tokenizer.Tokenizer, e int, rt *deepseek2.Routes) *RoutingTrace {
	k := rt.K
	agg := make([]int, e)
	var sums, top12, margins []float64
	tr := &RoutingTrace{}
	used := make([]map[int]bool, len(prompts))
	row := 0
	for pi, p := range prompts {
		load := make([]int, e)
		pr := PromptRouting{ID: p.ID, Label: p.Label, Tokens: len(p.TokenIDs)}
		used[pi] = make(map[int]bool)
		for pos, id := range p.TokenIDs {
			ids := rt.IDs[row*k : (row+1)*k]
			ws := rt.Weights[row*k : (row+1)*k]
			tok := TokenRoute{Position: pos, TokenID: id, RouteMargin: Num(rt.Margin[row])}
			if tz != nil {
				s, piece := p.Tokens[pos], tz.Piece(id)
				tok.Token, tok.DecodedPiece = &s, &piece
			}
			var sum float64
			for j, x := range ids {
				load[x]++
				agg[x]++
				used[pi][int(x)] = true
				tok.ExpertsByWeight = append(tok.ExpertsByWeight, ExpertWeight{int(x), Num(ws[j])})
				sum += float64(ws[j])
			}
			// Descending weight; equal weights keep the router's order.
			slices.SortStableFunc(tok.ExpertsByWeight, func(a, b ExpertWeight) int {
				switch {
				case a.Weight > b.Weight:
					return -1
				case a.Weight < b.Weight:
					return 1
				}
				return 0
			})
			tok.SelectedWeightSum = Num(sum)
			sums = append(sums, sum)
			margins = append(margins, float64(rt.Margin[row]))
			if k > 1 {
				m := tok.ExpertsByWeight[0].Weight - tok.ExpertsByWeight[1].Weight
				tok.Top1Top2Margin = &m
				top12 = append(top12, float64(m))
			}
			pr.TokenRoutes = append(pr.TokenRoutes, tok)
			row++
		}
		pr.Load = load
		pr.Metrics = loadMetrics(load)
		pr.TopExperts = topExperts(load, 8)
		tr.PerPrompt = append(tr.PerPrompt, pr)
	}
	for i := range prompts {
		for j := i + 1; j < len(prompts); j++ {
			shared, union := 0, len(used[i])
			for x := range used[j] {
				if used[i][x] {
					shared++
				} else {
					union++
				}
			}
			pj := PairJaccard{Left: prompts[i].ID, Right: prompts[j].ID, Shared: shared, Union: union}
			pj.Jaccard = Num(float64(shared) / float64(union)) // NaN (null) for an empty union
			tr.PairJaccard = append(tr.PairJaccard, pj)
		}
	}
	tr.AggregateLoad = agg
	tr.AggregateMetrics = loadMetrics(agg)
	tr.TopExperts = topExperts(agg, 12)
	tr.SelectedWeightSum = spread(sums, true)
	if k > 1 {
		s := spread(top12, false)
		tr.Top1Top2Margin = &s
	}
	tr.RouteMargin = spread(margins, true)
	return tr
}

// topExperts lists the n experts with the most routes, most first (ties
// by expert number), leaving out experts without routes.
func topExperts(load []int, n int) []ExpertRoutes {
	out := make([]ExpertRoutes, 0, len(load))
	for e, r := range load {
		if r > 0 {
			out = append(out, ExpertRoutes{e, r})
		}
	}
	slices.SortStableFunc(out, func(a, b ExpertRoutes) int { return b.Routes - a.Routes })
	return out[:min(n, len(out))]
}
