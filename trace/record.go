package trace

import (
	"slices"

	"github.com/dsfs/dsfs/tokenizer"
)

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

// Routes are the experts a layer's router chose for each token of every
// prompt, in prompt order: K a token, their combine weights, and how far
// each token's choice is from a tie in selection score.
type Routes struct {
	K       int
	IDs     []int32
	Weights []float32
	Margin  []float32
}

// Routing is the seed's route trace of prompts' routes rt over e experts;
// tz spells the tokens (nil: null).
func Routing(prompts []Prompt, tz *tokenizer.Tokenizer, e int, rt Routes) *RoutingTrace {
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
	tr.SelectedWeightSum = SpreadOf(sums, true)
	if k > 1 {
		s := SpreadOf(top12, false)
		tr.Top1Top2Margin = &s
	}
	tr.RouteMargin = SpreadOf(margins, true)
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
