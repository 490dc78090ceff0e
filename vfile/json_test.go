package vfile

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// jsonInner exercises field rules: omitempty of each kind, a skipped and
// an unexported field, a renamed one.
type jsonInner struct {
	Name    string            `json:"name"`
	Count   int64             `json:"count,omitempty"`
	Ratio   float64           `json:"ratio,omitempty"`
	Flag    bool              `json:"flag,omitempty"`
	Shape   []int64           `json:"shape,omitempty"`
	Range   [2]int64          `json:"range"`
	Ptr     *int              `json:"ptr,omitempty"`
	Any     any               `json:"any"`
	Map     map[string]int    `json:"map"`
	Raw     []byte            `json:"raw"`
	Skipped string            `json:"-"`
	hidden  int               // unexported: never written
	Untaged string            // written under its Go name
	Tags    map[string]string `json:"tags,omitempty"`
}

// jsonEmbeds is a struct encoding/json flattens: WriteJSON leaves it whole.
type jsonEmbeds struct {
	jsonInner
	Extra string `json:"extra"`
}

// jsonStringOpt has a tag option WriteJSON does not repeat.
type jsonStringOpt struct {
	N int `json:"n,string"`
}

// valueMarshaler and ptrMarshaler write themselves; the second only when
// addressable, which WriteJSON must respect as encoding/json does.
type valueMarshaler struct{ n int }

func (m valueMarshaler) MarshalJSON() ([]byte, error) {
	return []byte(`{"v": ` + strconv.Itoa(m.n) + `, "list": [1, 2]}`), nil
}

type ptrMarshaler struct{ N int }

func (m *ptrMarshaler) MarshalJSON() ([]byte, error) { return []byte(`"ptr"`), nil }

type jsonOuter struct {
	Title    string           `json:"title"`
	Inners   []jsonInner      `json:"inners"`
	PInners  []*jsonInner     `json:"p_inners"`
	Nested   [][]jsonInner    `json:"nested"`
	Embeds   *jsonEmbeds      `json:"embeds"`
	StrOpt   jsonStringOpt    `json:"str_opt"`
	Value    valueMarshaler   `json:"value"`
	Ptrs     []ptrMarshaler   `json:"ptrs"`
	PtrField ptrMarshaler     `json:"ptr_field"`
	When     time.Time        `json:"when"`
	Empty    struct{}         `json:"empty"`
	Anys     []any            `json:"anys"`
	Inner    jsonInner        `json:"inner"`
	Omitted  []jsonInner      `json:"omitted,omitempty"`
	ByName   map[string][]int `json:"by_name"`
}

type jsonGen struct{ r *rand.Rand }

func (g jsonGen) str() string {
	const chars = "ab<>&\"\\\n\té€\u2028 _"
	rs := []rune(chars)
	b := make([]rune, g.r.IntN(6))
	for i := range b {
		b[i] = rs[g.r.IntN(len(rs))]
	}
	return string(b)
}

func (g jsonGen) ints() []int64 {
	switch g.r.IntN(3) {
	case 0:
		return nil
	case 1:
		return []int64{}
	}
	s := make([]int64, 1+g.r.IntN(3))
	for i := range s {
		s[i] = g.r.Int64N(1<<40) - 1<<39
	}
	return s
}

func (g jsonGen) anyValue(depth int) any {
	switch g.r.IntN(7) {
	case 0:
		return nil
	case 1:
		return g.str()
	case 2:
		return g.r.Float64() * 1e6
	case 3:
		return g.ints()
	case 4:
		if depth < 2 {
			return g.inner(depth + 1)
		}
		return true
	case 5:
		return map[string]any{g.str(): g.r.IntN(9), "k": []any{}}
	}
	return &ptrMarshaler{}
}

func (g jsonGen) inner(depth int) jsonInner {
	in := jsonInner{Name: g.str(), Shape: g.ints(), Range: [2]int64{g.r.Int64(), -g.r.Int64()},
		Any: g.anyValue(depth), Skipped: "no", hidden: 1, Untaged: g.str()}
	if g.r.IntN(2) == 0 {
		in.Count = g.r.Int64N(100)
		in.Ratio = g.r.Float64()
		in.Flag = true
		n := g.r.IntN(5)
		in.Ptr = &n
	}
	if g.r.IntN(2) == 0 {
		in.Map = map[string]int{"b": 1, "a<": 2}
		in.Raw = []byte(g.str())
		in.Tags = map[string]string{}
	}
	return in
}

func (g jsonGen) inners(depth int) []jsonInner {
	if g.r.IntN(4) == 0 {
		return nil
	}
	s := make([]jsonInner, g.r.IntN(4))
	for i := range s {
		s[i] = g.inner(depth)
	}
	return s
}

func (g jsonGen) outer() *jsonOuter {
	o := &jsonOuter{Title: g.str(), Inners: g.inners(0), Nested: [][]jsonInner{g.inners(0), nil, {}},
		StrOpt: jsonStringOpt{g.r.IntN(9)}, Value: valueMarshaler{g.r.IntN(9)},
		Ptrs: []ptrMarshaler{{1}, {2}}, When: time.Unix(g.r.Int64N(1<<31), 0).UTC(),
		Anys: []any{g.anyValue(0), g.anyValue(0), ptrMarshaler{3}}, Inner: g.inner(0), Omitted: g.inners(0),
		ByName: map[string][]int{"x": {1}, "y": nil}}
	for range g.r.IntN(3) {
		in := g.inner(0)
		o.PInners = append(o.PInners, &in, nil)
	}
	if g.r.IntN(2) == 0 {
		o.Embeds = &jsonEmbeds{jsonInner: g.inner(1), Extra: g.str()}
	}
	return o
}

// TestWriteJSONSameBytes: WriteJSON writes JSON's bytes for random values
// of every shape the walker handles or leaves to encoding/json.
func TestWriteJSONSameBytes(t *testing.T) {
	seed := rand.Uint64()
	g := jsonGen{rand.New(rand.NewPCG(seed, 0))}
	for i := range 300 {
		var v any = g.outer()
		switch i % 5 {
		case 1:
			v = *v.(*jsonOuter) // not addressable: pointer-receiver methods do not apply
		case 2:
			v = g.inners(0)
		case 3:
			v = g.anyValue(0)
		}
		want, err := JSON(v)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteJSON(&got, v); err != nil {
			t.Fatalf("seed %d, value %d: %v", seed, i, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Fatalf("seed %d, value %d: WriteJSON wrote\n%s\nJSON gives\n%s", seed, i, got.Bytes(), want)
		}
	}
}

func TestWriteJSONError(t *testing.T) {
	v := struct {
		F []any `json:"f"`
	}{F: []any{1, func() {}}}
	_, want := JSON(v)
	err := WriteJSON(&bytes.Buffer{}, v)
	if want == nil || err == nil || err.Error() != want.Error() {
		t.Fatalf("WriteJSON: %v, JSON: %v", err, want)
	}
	if err := WriteJSON(failingWriter{}, []int{1, 2}); err == nil {
		t.Fatal("WriteJSON to a failing writer succeeded")
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, fmt.Errorf("disk full") }
