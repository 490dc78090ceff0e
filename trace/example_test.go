package trace_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"path/filepath"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/trace"
)

// A checkpoint's family is found by its config, opened, and asked to
// trace prompts; the tracer's files are the same for every family.
func ExampleFamily() {
	cat, err := checkpoint.Open(filepath.Join("..", "testdata", "trace", "v3-tiny"))
	if err != nil {
		log.Fatal(err)
	}
	defer cat.Close()
	family := trace.Lookup(cat.Config.Family) // registered by package deepseek2
	m, err := family.Open(cat, nil)           // no tokenizer: prompts of token ids
	if err != nil {
		log.Fatal(err)
	}
	prompts := []trace.Prompt{{ID: "p", TokenIDs: []int{1, 5, 9}}}
	if err := trace.Encode(prompts, nil, m.Vocab()); err != nil {
		log.Fatal(err)
	}
	tr, err := m.Trace(prompts, trace.Options{})
	if err != nil {
		log.Fatal(err)
	}
	files, err := trace.Files(tr, m.Layers(), m.Problems())
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range files {
		fmt.Println(f.Name, len(f.Tensors))
	}
	b, err := tr.LayerJSON(context.Background(), 3) // runs layers 0-3
	if err != nil {
		log.Fatal(err)
	}
	var rec struct {
		Layer   int    `json:"layer"`
		FFN     string `json:"ffn"`
		Routing struct {
			AggregateMetrics struct {
				Routes int `json:"routes"`
			} `json:"aggregate_metrics"`
		} `json:"routing"`
	}
	if err := json.Unmarshal(b, &rec); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("layer %d: %s, %d routes\n", rec.Layer, rec.FFN, rec.Routing.AggregateMetrics.Routes)
	// Output:
	// prompts.json 0
	// trace.json 0
	// layers/00.json 0
	// layers/00.safetensors 5
	// layers/01.json 0
	// layers/01.safetensors 7
	// layers/01.load.png 0
	// layers/02.json 0
	// layers/02.safetensors 7
	// layers/02.load.png 0
	// layers/03.json 0
	// layers/03.safetensors 7
	// layers/03.load.png 0
	// routes/p.png 0
	// layer 3: moe, 12 routes
}
