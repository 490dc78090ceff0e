package figures

import (
	"bytes"
	"cmp"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/image/font/sfnt"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/brewer"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The bounds of a figure's size in pixels.
const (
	MinWidth, MinHeight = 640, 400
	MaxWidth, MaxHeight = 4000, 3000
)

// dpi is the resolution figures are drawn at: gonum sizes text in points,
// so this sets how large text is against the pixels.
const dpi = 96

// px is n pixels as a length at the figures' resolution.
func px(n float64) vg.Length { return vg.Length(n) * vg.Inch / dpi }

// render paints a w × h pixel canvas (each brought within the bounds) and
// encodes it as PNG. gonum panics on some input it cannot draw; the panic
// comes back as an error, so that a figure never takes its caller down.
func render(w, h int, paint func(dc draw.Canvas) error) (b []byte, err error) {
	w, h = min(max(w, MinWidth), MaxWidth), min(max(h, MinHeight), MaxHeight)
	defer func() {
		if r := recover(); r != nil {
			b, err = nil, fmt.Errorf("figures: gonum could not draw the figure: %v", r)
		}
	}()
	c := vgimg.NewWith(vgimg.UseWH(px(float64(w)), px(float64(h))), vgimg.UseDPI(dpi))
	const margin = 6 // pixels around what gonum draws, which it draws up to the edges
	if err := paint(draw.Crop(draw.New(c), px(margin), -px(margin), px(margin), -px(margin))); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("figures: %w", err)
	}
	return buf.Bytes(), nil
}

// withLegend draws p on dc and legend l in a column of width w (see
// legendWidth; 0 for none) to the right of it, where it hides no data:
// gonum draws a plot's own legend inside the data area.
func withLegend(dc draw.Canvas, p *plot.Plot, l plot.Legend, w vg.Length) {
	if w == 0 {
		p.Draw(dc)
		return
	}
	p.Draw(draw.Crop(dc, 0, -w, 0, 0))
	l.Top, l.Left = true, true
	l.Draw(draw.Crop(dc, dc.Max.X-dc.Min.X-w+px(8), 0, 0, -px(36)))
}

// legendRoom is the height in pixels a figure needs to show a legend of
// n entries beside its plot: gonum draws a legend past its canvas rather
// than clip it.
func legendRoom(n int) int { return 18*n + 80 }

// legendWidth is the width of the column withLegend gives l, of n
// entries: 0 when n is.
func legendWidth(l plot.Legend, n int) vg.Length {
	if n == 0 {
		return 0
	}
	r := l.Rectangle(draw.Canvas{})
	return r.Max.X - r.Min.X + px(16)
}

// legend returns an empty legend in the figures' style.
func legend() plot.Legend {
	l := plot.NewLegend()
	l.TextStyle.Font.Size = vg.Points(10)
	l.Padding = px(4)
	return l
}

// newPlot returns a plot titled title in the figures' style.
func newPlot(title string) *plot.Plot {
	p := plot.New()
	p.Title.Text = printable(title)
	p.Title.Padding = px(10)
	return p
}

// box is a legend entry's swatch: a filled square of one colour.
type box struct{ color color.Color }

func (b box) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(b.color, []vg.Point{
		{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y},
		{X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y},
	})
}

// categorical is the colours given to categories (roles, dtypes,
// prompts) in order: ColorBrewer's Set1 without its grey, then Dark2 and
// Set3, 27 in all. The grey is other's, for what does not get a colour
// of its own.
var categorical, other = func() ([]color.Color, color.Color) {
	var out []color.Color
	for _, p := range []struct {
		name string
		n    int
	}{{"Set1", 9}, {"Dark2", 8}, {"Set3", 12}} {
		pal, err := brewer.GetPalette(brewer.TypeQualitative, p.name, p.n)
		if err != nil {
			panic(err)
		}
		out = append(out, pal.Colors()...)
	}
	grey := out[8]
	return slices.Delete(out, 8, 9), grey
}()

// expertColor is the colour of expert e in a route map: hues spread by
// the golden ratio, so that experts with near numbers look different,
// light enough to read a black number on.
func expertColor(e int) color.Color {
	h := math.Mod(float64(e)*0.6180339887498949, 1)
	return palette.HSVA{H: h, S: 0.45, V: 1, A: 1}
}

// integers marks whole numbers only (experts, counts), a labelled tick
// every 1, 2 or 5 times a power of ten, so that at most about ten are.
type integers struct{}

func (integers) Ticks(lo, hi float64) []plot.Tick {
	step := 1.0
	for i := 0; (hi-lo)/step > 10; i++ {
		step *= []float64{2, 2.5, 2}[i%3] // 1, 2, 5, 10, 20, 50, ...
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		if v == 0 {
			v = 0 // not -0
		}
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', 0, 64)})
	}
	return ts
}

// category is a named quantity in a chart's legend.
type category struct {
	name  string
	total float64
}

// ranked orders categories by total, largest first (ties by name), and
// keeps at most n; the rest are summed into one named rest, which is
// returned with the names it holds.
func ranked(totals map[string]float64, n int) (kept []category, rest map[string]bool) {
	all := make([]category, 0, len(totals))
	for name, t := range totals {
		all = append(all, category{name, t})
	}
	slices.SortFunc(all, func(a, b category) int {
		if c := cmp.Compare(b.total, a.total); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	if len(all) <= n {
		return all, nil
	}
	rest = make(map[string]bool)
	for _, c := range all[n-1:] {
		rest[c.name] = true
	}
	return all[:n-1], rest
}

// glyphs reports whether the plots' font draws every rune of s.
func glyphs(s string) bool {
	face := font.DefaultCache.Lookup(plot.DefaultFont, vg.Points(10))
	var buf sfnt.Buffer
	for _, r := range s {
		if i, err := face.Face.GlyphIndex(&buf, r); err != nil || i == 0 {
			return false
		}
	}
	return true
}

// printable is s with each rune the font cannot draw shown as '?'.
func printable(s string) string {
	if glyphs(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if glyphs(string(r)) {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
