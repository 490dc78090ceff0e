package views

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"runtime"
)

func putF32(dst []byte, f float32) { binary.LittleEndian.PutUint32(dst, math.Float32bits(f)) }

// mustJSON encodes a value built from maps, slices and strings, which
// cannot fail.
func mustJSON(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }
