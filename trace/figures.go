package trace

import (
	"context"
	"fmt"

	"github.com/dsfs/dsfs/figures"
)

// routed reports whether a layer with activations acts routes tokens to
// experts: they hold their ids.
func routed(acts []Activation) bool {
	for _, a := range acts {
		if a.Kind == "topk_ids" {
			return true
		}
	}
	return false
}

// routeMapPNG is routes/<id>.png: the route map of prompt p (an index
// into tr.Prompts()), running every layer tr runs.
func routeMapPNG(ctx context.Context, tr Tracer, p int) ([]byte, error) {
	m, err := routeMap(ctx, tr, p)
	if err == nil {
		var b []byte
		if b, err = m.PNG(); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("routes/%s.png: %w", tr.Prompts()[p].ID, err)
}

// routeMap is prompt p's route map: the expert each of its tokens went to
// first (the largest combine weight) at every layer tr runs.
func routeMap(ctx context.Context, tr Tracer, p int) (figures.RouteMap, error) {
	m := figures.RouteMap{Title: fmt.Sprintf("%s: the expert each token went to first, by layer", tr.Prompts()[p].ID)}
	for l := range tr.Layers() {
		rt, err := tr.Routing(ctx, l)
		if err != nil {
			return m, err
		}
		m.Layers = append(m.Layers, l)
		if rt == nil {
			m.Top = append(m.Top, nil) // dense: filled below, once the tokens are known
			continue
		}
		pr := rt.PerPrompt[p]
		m.Experts = len(pr.Load)
		row := make([]int, len(pr.TokenRoutes))
		for t, tok := range pr.TokenRoutes {
			row[t] = tok.ExpertsByWeight[0].Expert // sorted by weight, most first
		}
		if m.Tokens == nil {
			// Every layer routes the prompt's tokens; a layer that routes
			// another count fails the map's check (RouteMap.PNG).
			for _, tok := range pr.TokenRoutes {
				m.Tokens = append(m.Tokens, figures.Token{ID: tok.TokenID, Piece: tok.DecodedPiece})
			}
		}
		m.Top = append(m.Top, row)
	}
	for i, row := range m.Top {
		if row == nil {
			row = make([]int, len(m.Tokens))
			for t := range row {
				row[t] = -1
			}
			m.Top[i] = row
		}
	}
	return m, nil
}

// loadPNG is layers/NN.load.png: layer l's load chart, running the layers
// up to l.
func loadPNG(ctx context.Context, tr Tracer, l int) ([]byte, error) {
	c, err := loadChart(ctx, tr, l)
	if err == nil {
		var b []byte
		if b, err = c.PNG(); err == nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("layer %d's load chart: %w", l, err)
}

// loadChart is how many token routes of each prompt layer l sent to each
// expert.
func loadChart(ctx context.Context, tr Tracer, l int) (figures.Load, error) {
	rt, err := tr.Routing(ctx, l)
	if err != nil {
		return figures.Load{}, err
	}
	if rt == nil {
		return figures.Load{}, fmt.Errorf("layer %d routes nothing", l)
	}
	tokens, k := 0, 0
	c := figures.Load{Experts: len(rt.AggregateLoad)}
	for _, pr := range rt.PerPrompt {
		c.Prompts = append(c.Prompts, figures.Series{Name: pr.ID, Counts: pr.Load})
		tokens += pr.Tokens
		if len(pr.TokenRoutes) > 0 {
			k = len(pr.TokenRoutes[0].ExpertsByWeight)
		}
	}
	c.Title = fmt.Sprintf("layer %d: routes per expert, %s, %s, %s per token", l,
		count(len(rt.PerPrompt), "prompt"), count(tokens, "token"), count(k, "expert"))
	return c, nil
}

// count is n things, "thing" for one.
func count(n int, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}
