package figures

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Bytes is how the tensor bytes of checkpoints (a source and the views
// made from it) divide by role and by dtype: two charts, one above the
// other, each with a bar per checkpoint (the first at the top) stacked by
// role, then by dtype, the largest part first.
type Bytes struct {
	Title string
	Bars  []ByteBar
}

// ByteBar is one checkpoint's tensor bytes by role and by dtype (each
// adding up to its tensor bytes).
type ByteBar struct {
	Name    string
	ByRole  map[string]int64
	ByDType map[string]int64
}

// A bar's height and the room each takes, in pixels.
const barHeight, rowHeight = 24, 36

// PNG draws the charts.
func (b Bytes) PNG() ([]byte, error) {
	if len(b.Bars) == 0 {
		return nil, fmt.Errorf("figures: byte chart %q: no bars", b.Title)
	}
	var most int64
	for _, bar := range b.Bars {
		for _, m := range []map[string]int64{bar.ByRole, bar.ByDType} {
			var sum int64
			for k, n := range m {
				if n < 0 {
					return nil, fmt.Errorf("figures: byte chart %q: %s: %s has %d bytes", b.Title, bar.Name, k, n)
				}
				sum += n
			}
			most = max(most, sum)
		}
	}
	unit, name := byteUnit(most)
	roles, dtypes := make(map[string]bool), make(map[string]bool)
	for _, bar := range b.Bars {
		for k := range bar.ByRole {
			roles[k] = true
		}
		for k := range bar.ByDType {
			dtypes[k] = true
		}
	}
	entries := min(max(len(roles), len(dtypes)), len(categorical))
	panel := max(rowHeight*len(b.Bars)+120, legendRoom(entries))
	return render(1000, 2*panel, func(dc draw.Canvas) error {
		type chart struct {
			title string
			parts func(ByteBar) map[string]int64
			p     *plot.Plot
			lg    plot.Legend
			n     int
		}
		charts := []*chart{
			{title: b.Title + ": by role", parts: func(bar ByteBar) map[string]int64 { return bar.ByRole }},
			{title: b.Title + ": by dtype", parts: func(bar ByteBar) map[string]int64 { return bar.ByDType }},
		}
		var lw vg.Length
		for _, c := range charts {
			var err error
			if c.p, c.lg, c.n, err = b.chart(c.title, c.parts, unit, name); err != nil {
				return err
			}
			lw = max(lw, legendWidth(c.lg, c.n))
		}
		half, gap := (dc.Max.Y-dc.Min.Y)/2, px(8)
		withLegend(draw.Crop(dc, 0, 0, half+gap, 0), charts[0].p, charts[0].lg, lw)
		withLegend(draw.Crop(dc, 0, 0, 0, -half-gap), charts[1].p, charts[1].lg, lw)
		return nil
	})
}

// chart is one of the two charts, parts giving each bar's parts, in
// units of unit bytes called name.
func (b Bytes) chart(title string, parts func(ByteBar) map[string]int64, unit float64, name string) (*plot.Plot, plot.Legend, int, error) {
	totals := make(map[string]float64)
	for _, bar := range b.Bars {
		for k, n := range parts(bar) {
			totals[k] += float64(n)
		}
	}
	kept, rest := ranked(totals, len(categorical))
	p := newPlot(title)
	p.X.Label.Text = "tensor data, " + name
	p.Add(plotter.NewGrid()) // first, under the bars
	lg := legend()
	n := len(b.Bars)
	names := make([]string, n)
	for i, bar := range b.Bars {
		names[n-1-i] = printable(bar.Name) // the first bar at the top
	}
	type part struct {
		label string
		color color.Color
		holds func(k string) bool
	}
	var ps []part
	for i, c := range kept {
		ps = append(ps, part{c.name, categorical[i], func(k string) bool { return k == c.name }})
	}
	if rest != nil {
		ps = append(ps, part{fmt.Sprintf("%d others", len(rest)), other, func(k string) bool { return rest[k] }})
	}
	var below *plotter.BarChart
	for _, pt := range ps {
		vs := make(plotter.Values, n)
		for i, bar := range b.Bars {
			var sum int64 // in integers: the maps' order must not round differently
			for k, v := range parts(bar) {
				if pt.holds(k) {
					sum += v
				}
			}
			vs[n-1-i] = float64(sum) / unit
		}
		bc, err := plotter.NewBarChart(vs, px(barHeight))
		if err != nil {
			return nil, lg, 0, err
		}
		bc.Horizontal = true
		bc.Color = pt.color
		bc.LineStyle.Width = 0
		if below != nil {
			bc.StackOn(below)
		}
		p.Add(bc)
		below = bc
		lg.Add(printable(pt.label), box{pt.color})
	}
	p.NominalY(names...)
	p.X.Min, p.X.Max = 0, p.X.Max*1.03
	p.X.Tick.Marker = integers{} // whole units: a bar is at least one when the unit is above bytes
	return p, lg, len(ps), nil
}

// byteUnit is the binary unit in which n bytes is under 1024 units.
func byteUnit(n int64) (float64, string) {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for f := float64(n); f >= 1024 && u < len(units)-1; f /= 1024 {
		u++
	}
	return float64(int64(1) << (10 * u)), units[u]
}
