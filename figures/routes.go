package figures

import (
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Token is one token of a prompt as a route map labels it: its piece of
// text when Piece is set and the font draws it, else its id.
type Token struct {
	ID    int
	Piece *string
}

// label is the token's tick label: its piece with blanks made visible,
// at most 12 characters, else #ID.
func (t Token) label() string {
	if t.Piece == nil {
		return "#" + strconv.Itoa(t.ID)
	}
	s := strings.NewReplacer(" ", "·", "\n", `\n`, "\t", `\t`, "\r", `\r`).Replace(*t.Piece)
	if r := []rune(s); len(r) > 12 {
		s = string(r[:11]) + "…"
	}
	if s == "" || !glyphs(s) {
		return "#" + strconv.Itoa(t.ID)
	}
	return s
}

// RouteMap is which expert each token of one prompt went to first, layer
// by layer: a grid of tokens (x, in prompt order) by layers (y, the first
// at the bottom), each cell coloured by its expert and, where there is
// room, labelled with the expert's number. The colours only help the eye
// follow an expert along a prompt; the numbers say which it is.
type RouteMap struct {
	Title  string
	Tokens []Token
	// Layers are the rows' layer numbers, bottom up.
	Layers []int
	// Experts is the number of routed experts a layer has.
	Experts int
	// Top[i][t] is the expert that layer Layers[i] weighted most for
	// token t, or -1 where the layer routes nothing (a dense layer), whose
	// row is grey.
	Top [][]int
}

// The route map's cell sizes in pixels, and the least at which the cells
// hold their numbers and the tokens their labels.
const (
	cellWidth, cellHeight = 28, 20
	labelWidth, labelRows = 18, 12
	tickWidth             = 11
)

// PNG draws the route map.
func (m RouteMap) PNG() ([]byte, error) {
	T, L := len(m.Tokens), len(m.Layers)
	if T == 0 || L == 0 || len(m.Top) != L || m.Experts < 1 {
		return nil, fmt.Errorf("figures: route map %q: %d tokens, %d layers, %d rows of routes, %d experts", m.Title, T, L, len(m.Top), m.Experts)
	}
	for i, row := range m.Top {
		if len(row) != T {
			return nil, fmt.Errorf("figures: route map %q: layer %d has %d routes for %d tokens", m.Title, m.Layers[i], len(row), T)
		}
		for t, e := range row {
			if e < -1 || e >= m.Experts {
				return nil, fmt.Errorf("figures: route map %q: layer %d token %d: expert %d of %d", m.Title, m.Layers[i], t, e, m.Experts)
			}
		}
	}
	// Room around the grid: the y axis and the legend on the sides, the
	// title, the token labels and the axis label above and below.
	const marginX, marginY = 220, 200
	cw := min(float64(cellWidth), float64(MaxWidth-marginX)/float64(T))
	ch := min(float64(cellHeight), float64(MaxHeight-marginY)/float64(L))
	w, h := marginX+int(math.Ceil(cw*float64(T))), marginY+int(math.Ceil(ch*float64(L)))
	// The cells grow to fill a figure the bounds make larger.
	cw = max(cw, float64(MinWidth-marginX)/float64(T))
	ch = max(ch, float64(MinHeight-marginY)/float64(L))

	return render(w, h, func(dc draw.Canvas) error {
		p := newPlot(m.Title)
		p.X.Label.Text = "token (each cell: the expert the router weighted most)"
		p.Y.Label.Text = "layer"
		dense := false
		for _, row := range m.Top {
			dense = dense || row[0] < 0
		}
		grid := newRouteGrid(m)
		hm := plotter.NewHeatMap(grid, grid.palette)
		hm.Min, hm.Max = 0, float64(len(grid.palette)-1)
		hm.NaN = color.Gray{Y: 0xd8}
		p.Add(hm)
		if cw >= labelWidth && ch >= labelRows {
			var xys plotter.XYs
			var labels []string
			for i, row := range m.Top {
				for t, e := range row {
					if e >= 0 {
						xys = append(xys, plotter.XY{X: float64(t), Y: float64(i)})
						labels = append(labels, strconv.Itoa(e))
					}
				}
			}
			if len(labels) > 0 {
				l, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
				if err != nil {
					return err
				}
				for i := range l.TextStyle {
					l.TextStyle[i].Font.Size = vg.Points(min(8, ch*0.45))
					l.TextStyle[i].XAlign, l.TextStyle[i].YAlign = draw.XCenter, draw.YCenter
				}
				p.Add(l)
			}
		}
		if cw >= tickWidth {
			ticks := make([]plot.Tick, T)
			for t, tok := range m.Tokens {
				ticks[t] = plot.Tick{Value: float64(t), Label: tok.label()}
			}
			p.X.Tick.Marker = plot.ConstantTicks(ticks)
			p.X.Tick.Label.Rotation = math.Pi / 2
			p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = draw.XRight, draw.YCenter
		}
		step := max(1, int(math.Ceil(12/ch)))
		var ticks []plot.Tick
		for i, l := range m.Layers {
			if i%step == 0 {
				ticks = append(ticks, plot.Tick{Value: float64(i), Label: strconv.Itoa(l)})
			}
		}
		p.Y.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Padding, p.Y.Padding = 0, 0

		lg, n := legend(), 0
		if dense {
			lg.Add("dense layer", box{hm.NaN})
			n++
		}
		withLegend(dc, p, lg, legendWidth(lg, n))
		return nil
	})
}

// routeGrid is a route map as gonum's heat maps read it: column t, row i
// is the index in palette of the colour of expert Top[i][t], NaN where
// the layer routes nothing. The palette holds the experts the map shows,
// not every expert of the model, so that its size is bounded by the
// map's.
type routeGrid struct {
	m       RouteMap
	index   map[int]int // expert -> its colour's index
	palette expertPalette
}

func newRouteGrid(m RouteMap) routeGrid {
	g := routeGrid{m: m, index: make(map[int]int)}
	var shown []int
	for _, row := range m.Top {
		for _, e := range row {
			if _, ok := g.index[e]; !ok && e >= 0 {
				g.index[e] = 0
				shown = append(shown, e)
			}
		}
	}
	slices.Sort(shown)
	for i, e := range shown {
		g.index[e] = i
		g.palette = append(g.palette, expertColor(e))
	}
	for len(g.palette) < 2 { // gonum scales a palette over its first to last colour
		g.palette = append(g.palette, color.White)
	}
	return g
}

func (g routeGrid) Dims() (c, r int) { return len(g.m.Tokens), len(g.m.Layers) }
func (g routeGrid) X(c int) float64  { return float64(c) }
func (g routeGrid) Y(r int) float64  { return float64(r) }
func (g routeGrid) Z(c, r int) float64 {
	if e := g.m.Top[r][c]; e >= 0 {
		return float64(g.index[e])
	}
	return math.NaN()
}

// expertPalette holds the colours of a route map's experts.
type expertPalette []color.Color

func (p expertPalette) Colors() []color.Color { return p }
