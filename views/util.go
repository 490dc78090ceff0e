package views

import (
	"encoding/binary"
	"math"
	"runtime"
)

func putF32(dst []byte, f float32) { binary.LittleEndian.PutUint32(dst, math.Float32bits(f)) }

// workers is how many goroutines a whole-checkpoint pass uses.
func workers() int { return runtime.GOMAXPROCS(0) }
