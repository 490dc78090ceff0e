package figures

import (
	"fmt"

	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Load is one layer's expert load over prompts: for each expert, how many
// of each prompt's token routes went to it, drawn as bars stacked prompt
// on prompt in prompt order.
type Load struct {
	Title   string
	Experts int
	Prompts []Series
}

// Series is one prompt's routes per expert.
type Series struct {
	Name   string
	Counts []int // one per expert
}

// PNG draws the chart.
func (l Load) PNG() ([]byte, error) {
	if l.Experts < 1 || len(l.Prompts) == 0 {
		return nil, fmt.Errorf("figures: load chart %q: %d experts, %d prompts", l.Title, l.Experts, len(l.Prompts))
	}
	for _, s := range l.Prompts {
		if len(s.Counts) != l.Experts {
			return nil, fmt.Errorf("figures: load chart %q: prompt %s has %d counts for %d experts", l.Title, s.Name, len(s.Counts), l.Experts)
		}
	}
	// Past the colours, the last prompts are one bar part.
	series := l.Prompts
	colors := categorical[:min(len(series), len(categorical))]
	if n := len(categorical); len(series) > n {
		rest := Series{Name: fmt.Sprintf("%d more prompts", len(series)-n+1), Counts: make([]int, l.Experts)}
		for _, s := range series[n-1:] {
			for e, c := range s.Counts {
				rest.Counts[e] += c
			}
		}
		series = append(series[:n-1:n-1], rest)
		colors = append(categorical[:n-1:n-1], other)
	}
	const marginX, perExpert = 360, 8
	return render(marginX+perExpert*l.Experts, max(480, legendRoom(len(series))), func(dc draw.Canvas) error {
		p := newPlot(l.Title)
		p.X.Label.Text = "expert"
		p.Y.Label.Text = "routes (tokens × experts per token)"
		lg := legend()
		for i, s := range series {
			lg.Add(printable(s.Name), box{colors[i]})
		}
		lw := legendWidth(lg, len(series))
		width := (dc.Max.X - dc.Min.X - lw - px(100)) / 1.1 / vg.Length(max(10, l.Experts))
		p.Add(plotter.NewGrid()) // first, under the bars
		var below *plotter.BarChart
		for i, s := range series {
			vs := make(plotter.Values, l.Experts)
			for e, c := range s.Counts {
				vs[e] = float64(c)
			}
			b, err := plotter.NewBarChart(vs, width)
			if err != nil {
				return err
			}
			b.Color = colors[i]
			b.LineStyle.Width = 0
			if below != nil {
				b.StackOn(below)
			}
			p.Add(b)
			below = b
		}
		p.X.Min, p.X.Max = -0.5, float64(l.Experts)-0.5
		p.Y.Min, p.Y.Max = 0, p.Y.Max*1.04
		p.X.Tick.Marker, p.Y.Tick.Marker = integers{}, integers{}
		withLegend(dc, p, lg, lw)
		return nil
	})
}
