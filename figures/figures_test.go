package figures

import (
	"bytes"
	"image/png"
	"strings"
	"sync"
	"testing"
)

// figure is what every figure type is.
type figure interface{ PNG() ([]byte, error) }

func piece(s string) *string { return &s }

// routeMap is a route map of tokens × layers whose first layer is dense.
func routeMap(tokens, layers, experts int) RouteMap {
	m := RouteMap{Title: "p: the expert weighted most", Experts: experts}
	for t := range tokens {
		m.Tokens = append(m.Tokens, Token{ID: 100 + t, Piece: piece(" tok")})
	}
	for l := range layers {
		m.Layers = append(m.Layers, l)
		row := make([]int, tokens)
		for t := range row {
			row[t] = (l*7 + t*13) % experts
			if l == 0 {
				row[t] = -1
			}
		}
		m.Top = append(m.Top, row)
	}
	return m
}

// load is a load chart of prompts over experts.
func load(prompts, experts int) Load {
	l := Load{Title: "layer 1", Experts: experts}
	for p := range prompts {
		c := make([]int, experts)
		for e := range c {
			c[e] = (e + p) % 5
		}
		l.Prompts = append(l.Prompts, Series{Name: "prompt_" + strings.Repeat("x", p%3), Counts: c})
	}
	return l
}

// byteBars is a chart of n bars with roles × dtypes parts.
func byteBars(n, roles int) Bytes {
	b := Bytes{Title: "tensor bytes"}
	for i := range n {
		bar := ByteBar{Name: "view" + strings.Repeat("+", i), ByRole: map[string]int64{}, ByDType: map[string]int64{}}
		for r := range roles {
			bar.ByRole[string(rune('a'+r))+"_role"] = int64(r+1) << 20
			bar.ByDType[[]string{"BF16", "U8", "F32"}[r%3]] += int64(r+1) << 20
		}
		b.Bars = append(b.Bars, bar)
	}
	return b
}

// TestPNG decodes every figure with image/png: its size within the
// bounds and at least want, and the same bytes when drawn again.
func TestPNG(t *testing.T) {
	for _, tc := range []struct {
		name         string
		f            figure
		wantW, wantH int // at least
	}{
		{"route map, one token one layer", routeMap(1, 1, 1), MinWidth, MinHeight},
		{"route map, V2-Lite's 27 layers", routeMap(20, 27, 64), MinWidth, 27 * cellHeight},
		{"route map, wider than the bounds", routeMap(1000, 61, 256), MaxWidth, 61 * cellHeight},
		{"route map of a model of 2^40 experts", routeMap(3, 2, 1<<40), MinWidth, MinHeight}, // colours for the experts shown only
		{"load, one expert", load(1, 1), MinWidth, MinHeight},
		{"load, 384 experts", load(4, 384), 384 * 8, 480},
		{"load, more prompts than colours", load(40, 64), MinWidth, MinHeight},
		{"bytes, one bar", byteBars(1, 1), MinWidth, MinHeight},
		{"bytes, more roles than colours", byteBars(7, 40), 1000, 7 * rowHeight * 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.f.PNG()
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			r := img.Bounds()
			if r.Dx() < tc.wantW || r.Dy() < tc.wantH || r.Dx() > MaxWidth || r.Dy() > MaxHeight {
				t.Errorf("%d×%d pixels, want at least %d×%d and at most %d×%d", r.Dx(), r.Dy(), tc.wantW, tc.wantH, MaxWidth, MaxHeight)
			}
			again, err := tc.f.PNG()
			if err != nil || !bytes.Equal(again, b) {
				t.Errorf("drawn again: %d bytes (%v), first %d", len(again), err, len(b))
			}
		})
	}
}

// TestPNGConcurrent draws figures at once, as a mount's readers may: the
// same bytes as drawn alone.
func TestPNGConcurrent(t *testing.T) {
	figs := []figure{routeMap(12, 8, 64), load(4, 64), byteBars(5, 9)}
	want := make([][]byte, len(figs))
	for i, f := range figs {
		var err error
		if want[i], err = f.PNG(); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for range 4 {
		for i, f := range figs {
			wg.Go(func() {
				if b, err := f.PNG(); err != nil || !bytes.Equal(b, want[i]) {
					t.Errorf("figure %d drawn concurrently: %d bytes (%v), alone %d", i, len(b), err, len(want[i]))
				}
			})
		}
	}
	wg.Wait()
}

// TestBadData checks that data a figure cannot show give an error naming
// the figure, not a picture or a panic.
func TestBadData(t *testing.T) {
	short := routeMap(3, 2, 8)
	short.Top[1] = short.Top[1][:2]
	unknown := routeMap(3, 2, 8)
	unknown.Top[1][0] = 8
	counts := load(2, 8)
	counts.Prompts[1].Counts = counts.Prompts[1].Counts[:7]
	negative := byteBars(1, 2)
	negative.Bars[0].ByRole["a_role"] = -1
	for _, tc := range []struct {
		name string
		f    figure
		want string
	}{
		{"route map without tokens", RouteMap{Title: "empty", Layers: []int{0}, Top: [][]int{{}}, Experts: 4}, `route map "empty": 0 tokens`},
		{"route map with a short row", short, "layer 1 has 2 routes for 3 tokens"},
		{"route map with an expert out of range", unknown, "layer 1 token 0: expert 8 of 8"},
		{"load without prompts", Load{Title: "l", Experts: 4}, "0 prompts"},
		{"load with a short series", counts, "has 7 counts for 8 experts"},
		{"bytes without bars", Bytes{Title: "b"}, "no bars"},
		{"bytes with a negative part", negative, "a_role has -1 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tc.f.PNG()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %d bytes, error %v; want an error saying %q", len(b), err, tc.want)
			}
		})
	}
}

// TestTokenLabel checks what a route map writes under each token.
func TestTokenLabel(t *testing.T) {
	for _, tc := range []struct {
		tok  Token
		want string
	}{
		{Token{ID: 7}, "#7"},
		{Token{ID: 7, Piece: piece("Explain")}, "Explain"},
		{Token{ID: 7, Piece: piece(" how")}, "·how"},
		{Token{ID: 7, Piece: piece("\n")}, `\n`},
		{Token{ID: 7, Piece: piece("")}, "#7"},
		{Token{ID: 7, Piece: piece("解释")}, "#7"}, // the embedded fonts hold no CJK
		{Token{ID: 7, Piece: piece("abcdefghijklmnopq")}, "abcdefghijk…"},
	} {
		if got := tc.tok.label(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.tok, got, tc.want)
		}
	}
}

// TestByteUnit checks the unit a byte chart counts in.
func TestByteUnit(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		unit float64
		name string
	}{
		{0, 1, "bytes"}, {1023, 1, "bytes"}, {1024, 1024, "KiB"}, {5 << 30, 1 << 30, "GiB"}, {1 << 62, 1 << 40, "TiB"},
	} {
		if u, name := byteUnit(tc.n); u != tc.unit || name != tc.name {
			t.Errorf("%d bytes: unit %g %s, want %g %s", tc.n, u, name, tc.unit, tc.name)
		}
	}
}

// TestIntegers checks the ticks of experts and counts.
func TestIntegers(t *testing.T) {
	for _, tc := range []struct {
		lo, hi float64
		want   string
	}{
		{-0.5, 7.5, "0 1 2 3 4 5 6 7"},
		{0, 10, "0 1 2 3 4 5 6 7 8 9 10"},
		{0, 15, "0 2 4 6 8 10 12 14"},
		{-0.5, 255.5, "0 50 100 150 200 250"},
		{0, 0.5, "0"},
	} {
		var got []string
		for _, tk := range (integers{}).Ticks(tc.lo, tc.hi) {
			got = append(got, tk.Label)
		}
		if s := strings.Join(got, " "); s != tc.want {
			t.Errorf("[%g, %g]: %s, want %s", tc.lo, tc.hi, s, tc.want)
		}
	}
}
