// Package fp8ckpt turns a BF16 DeepSeek-V2/V3 checkpoint into the FP8
// layout DeepSeek-V3 is published in, for tests: every linear weight
// (2-D .weight outside the embedding, the head, the router and the norms)
// becomes F8_E4M3 with an F32 weight_scale_inv of 128x128 blocks (edge
// blocks cropped), the nearest E4M3 of value/scale with scale = block
// max/448, and config.json gains quantization_config. The values are
// whatever the rounding gives: what matters is that the result is a valid
// FP8 checkpoint with known bytes.
package fp8ckpt

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/codecs"
	"github.com/dsfs/dsfs/safetensors"
)

// Block is the scale block edge, DeepSeek-V3's weight_block_size.
const Block = 128

// isLinear says whether a tensor becomes FP8.
func isLinear(name string, shape []int64) bool {
	if len(shape) != 2 || !strings.HasSuffix(name, ".weight") {
		return false
	}
	for _, s := range []string{"embed_tokens", "lm_head", "layernorm", "norm.weight", "mlp.gate.weight"} {
		if strings.Contains(name, s) {
			return false
		}
	}
	return true
}

// nearestE4M3 returns the finite E4M3 byte nearest to v.
func nearestE4M3(v float32) byte {
	best, bd := byte(0), math.Inf(1)
	for b := range 256 {
		if b&0x7f == 0x7f {
			continue
		}
		if d := math.Abs(float64(codecs.E4M3ToFloat32(byte(b))) - float64(v)); d < bd {
			best, bd = byte(b), d
		}
	}
	return best
}

// Write converts the checkpoint in src into dst (created), shard by shard;
// other files are copied.
func Write(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	weightMap := make(map[string]string)
	for _, e := range entries {
		name := e.Name()
		data, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			return err
		}
		switch {
		case name == "config.json":
			data, err = checkpoint.PatchConfig(data, []string{"quantization_config"}, map[string]any{
				"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": []int{Block, Block}})
		case name == "model.safetensors.index.json":
			continue
		case strings.HasSuffix(name, ".safetensors"):
			data, err = convertShard(data, name, weightMap)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), data, 0o644); err != nil {
			return err
		}
	}
	idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": weightMap})
	return os.WriteFile(filepath.Join(dst, "model.safetensors.index.json"), idx, 0o644)
}

func convertShard(data []byte, shard string, weightMap map[string]string) ([]byte, error) {
	h, err := safetensors.ReadHeader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	var specs []safetensors.Spec
	out := make(map[string][]byte)
	for _, t := range h.Tensors {
		b := data[h.DataStart+t.Begin : h.DataStart+t.End]
		if !isLinear(t.Name, t.Shape) || t.DType != safetensors.BF16 {
			specs = append(specs, safetensors.Spec{Name: t.Name, DType: t.DType, Shape: t.Shape})
			out[t.Name] = b
			continue
		}
		rows, cols := t.Shape[0], t.Shape[1]
		v := make([]float32, rows*cols)
		codecs.DecodeBF16(v, b)
		sr, sc := (rows+Block-1)/Block, (cols+Block-1)/Block
		scale := make([]float32, sr*sc)
		for i := range rows {
			for j := range cols {
				k := i/Block*sc + j/Block
				scale[k] = max(scale[k], float32(math.Abs(float64(v[i*cols+j]))))
			}
		}
		for k := range scale {
			if scale[k] = scale[k] / 448; scale[k] == 0 {
				scale[k] = 1
			}
		}
		q := make([]byte, rows*cols)
		for i := range rows {
			for j := range cols {
				q[i*cols+j] = nearestE4M3(v[i*cols+j] / scale[i/Block*sc+j/Block])
			}
		}
		var sb bytes.Buffer
		binary.Write(&sb, binary.LittleEndian, scale)
		sname := strings.TrimSuffix(t.Name, ".weight") + ".weight_scale_inv"
		specs = append(specs, safetensors.Spec{Name: t.Name, DType: safetensors.F8E4M3, Shape: t.Shape},
			safetensors.Spec{Name: sname, DType: safetensors.F32, Shape: []int64{sr, sc}})
		out[t.Name], out[sname] = q, sb.Bytes()
	}
	sort.Slice(specs, func(i, j int) bool { return specs[i].Name < specs[j].Name })
	l, err := safetensors.NewLayout(nil, specs)
	if err != nil {
		return nil, err
	}
	var f bytes.Buffer
	f.Write(l.Header)
	for _, t := range l.Tensors {
		f.Write(out[t.Name])
		weightMap[t.Name] = shard
	}
	return f.Bytes(), nil
}
