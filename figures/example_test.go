package figures_test

import (
	"bytes"
	"fmt"
	"image/png"

	"github.com/dsfs/dsfs/figures"
)

// A route map of a three-token prompt through a dense layer and two MoE
// layers, decoded back as image/png reads it.
func Example() {
	piece := func(s string) *string { return &s }
	m := figures.RouteMap{
		Title:   "demo: the expert weighted most",
		Tokens:  []figures.Token{{ID: 0}, {ID: 412, Piece: piece("Hello")}, {ID: 11, Piece: piece(" world")}},
		Layers:  []int{0, 1, 2},
		Experts: 64,
		Top:     [][]int{{-1, -1, -1}, {5, 17, 17}, {42, 3, 60}},
	}
	b, err := m.PNG()
	if err != nil {
		fmt.Println(err)
		return
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		fmt.Println(err)
		return
	}
	again, _ := m.PNG()
	fmt.Println(img.Bounds().Dx() >= figures.MinWidth, img.Bounds().Dy() >= figures.MinHeight, bytes.Equal(b, again))
	// Output: true true true
}
