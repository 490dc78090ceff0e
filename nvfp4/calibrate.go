package nvfp4

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/diskcache"
)

// inputScaleDivisor is ModelOpt's: an NVFP4 activation's per-tensor scale
// is its amax over 6 (E2M1's largest value) times 448 (E4M3's), so that
// the amax lands on the largest code with the largest block scale.
const inputScaleDivisor = 6 * 448

// Calibration is a calibration of the experts' input scales: what the
// routed experts of each layer take in on a set of prompts. An expert's
// input_scale is then ModelOpt's amax/(6·448): w1 and w3 from the
// activations entering them (the routed hidden state, one value for both,
// as loaders fuse them), w2 from those entering it (the gated
// intermediate); an expert no calibration token reached takes its layer's
// largest value, an MTP expert (never run by the trace engine) the largest
// over every layer, and one with nothing measured 1.0.
type Calibration struct {
	// Amax runs the prompts through the model's layers and returns what
	// each layer's routed experts took in. The Transcoder calls it when
	// the first input_scale is read and keeps the result (in Disk too).
	Amax func(ctx context.Context) ([]Amax, error)
	// SHA256 is the hex SHA-256 of the prompts file: the calibration
	// set's identity, which the quantisation configs record.
	SHA256 string
	// Tokens counts the prompts' tokens.
	Tokens int
	// Precision is the trace precision the layers ran at (a8, fp32).
	Precision string
}

// Amax is what the routed experts of one layer took in: per expert, the
// largest activation magnitude entering w1 and w3 (In) and w2 (Mid), zero
// where no token reached it.
type Amax struct {
	Layer int       `json:"layer"`
	In    []float32 `json:"in"`
	Mid   []float32 `json:"mid"`
}

// calibration is a Calibration as a Transcoder uses it: run once, kept.
type calibration struct {
	*Calibration
	n *Transcoder

	mu     sync.Mutex
	layers map[int]Amax // by layer, once run
	max    [2]float32   // the largest In and Mid over every layer
	reach  int          // experts some token reached, over every layer
	took   time.Duration
	cached bool // read from the disk cache
}

// inputScale is expert weight t's input_scale.
func (n *Transcoder) inputScale(ctx context.Context, t *checkpoint.Tensor) (float32, error) {
	if n.cal == nil {
		return 1, nil
	}
	if err := n.cal.run(ctx); err != nil {
		return 0, fmt.Errorf("--nvfp4-calibrate: %w", err)
	}
	mid := t.Proj == "w2"
	pick := func(a Amax) float32 {
		v := a.In
		if mid {
			v = a.Mid
		}
		if t.Expert >= 0 && t.Expert < len(v) && v[t.Expert] > 0 {
			return v[t.Expert]
		}
		return slices.Max(append([]float32{0}, v...)) // not reached: the layer's largest
	}
	c := n.cal
	var amax float32
	if a, ok := c.layers[t.Layer]; ok && t.MTP < 0 {
		amax = pick(a)
	}
	if amax == 0 {
		amax = c.max[boolIndex(mid)]
	}
	if amax == 0 || amax != amax {
		return 1, nil
	}
	return amax / inputScaleDivisor, nil
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// run calibrates, once: from the disk cache when it holds this
// calibration of this checkpoint, else by running the layers (readers
// then wait; the trace engine stops when every one of them has gone, and
// the next reader resumes where it stopped).
func (c *calibration) run(ctx context.Context) error {
	c.mu.Lock()
	done := c.layers != nil
	c.mu.Unlock()
	if done {
		return nil
	}
	start := time.Now()
	key, keyed := c.key()
	var amax []Amax
	cached := false
	if b, ok := c.getDisk(key, keyed); ok && json.Unmarshal(b, &amax) == nil {
		cached = true
	} else {
		var err error
		if amax, err = c.Amax(ctx); err != nil {
			return err
		}
		if keyed && c.n.opt.Disk != nil {
			if b, err := json.Marshal(amax); err == nil {
				if err := c.n.opt.Disk.Put(key, b); err != nil {
					slog.Warn("disk cache: cannot keep the NVFP4 calibration; the next mount runs it again", "err", err)
				}
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.layers != nil {
		return nil
	}
	c.layers = make(map[int]Amax, len(amax))
	for _, a := range amax {
		c.layers[a.Layer] = a
		for i, v := range [][]float32{a.In, a.Mid} {
			for _, x := range v {
				c.max[i] = max(c.max[i], x)
			}
		}
		for _, x := range a.In {
			if x > 0 {
				c.reach++
			}
		}
	}
	c.took, c.cached = time.Since(start), cached
	return nil
}

func (c *calibration) getDisk(key diskcache.Key, keyed bool) ([]byte, bool) {
	if !keyed || c.n.opt.Disk == nil {
		return nil, false
	}
	return c.n.opt.Disk.GetBytes(key)
}

// key is the disk-cache key of this calibration of this checkpoint: the
// prompts' digest, the precision and the codec version, and every
// shard's stamp (FORMATS.md "Caches of derived facts": the weights decide
// the activations). A shard changed too recently to prove its bytes by its
// stamp gives no key: the calibration then runs, and is not kept.
func (c *calibration) key() (diskcache.Key, bool) {
	h := sha256.New()
	fmt.Fprintf(h, "dsfs nvfp4 calibration\x00codec %s\x00prompts %s\x00precision %s\x00", codecs.Version, c.SHA256, c.Precision)
	h.Write(c.n.cat.ConfigBytes)
	for _, sh := range c.n.cat.Shards {
		st, taken := sh.Stamp()
		if !st.Proven(taken) {
			return diskcache.Key{}, false
		}
		fmt.Fprintf(h, "\x00%s %+v", sh.Name, st)
	}
	return diskcache.Key(h.Sum(nil)), true
}

// stats are the calibration's figures for .dsfs/stats.json.
func (c *calibration) stats() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := map[string]any{"prompts_sha256": c.SHA256, "tokens": c.Tokens, "precision": c.Precision, "state": "not run yet"}
	if c.layers != nil {
		s["state"] = "done"
		if c.cached {
			s["state"] = "done (disk cache)"
		}
		s["layers"] = len(c.layers)
		s["experts_reached"] = c.reach
		s["seconds"] = math.Round(c.took.Seconds()*10) / 10
	}
	return s
}
