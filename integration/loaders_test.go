package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/checkpoint"
	"github.com/dsfs/dsfs/internal/testdata"
	"github.com/dsfs/dsfs/safetensors"
	"github.com/dsfs/dsfs/synth"
)

// The loader contract of nvfp4/ (docs/LOADERS.md, FORMATS.md "nvfp4/"):
// the shape NVIDIA's Model-Optimizer gives its NVFP4 builds of
// DeepSeek-V4-Flash and V4.1-Flash, which vLLM, SGLang and TensorRT-LLM
// load. These tests check each rule on mounted views, reading files as a
// loader does, and model the engines' own rules where they decide
// something (vLLM's fnmatch of an expert layer against ignore; the loaders'
// fusion of w1 and w3, which needs one weight_scale_2 and one input_scale).

// vllmExpertLayer is vLLM's _is_nvfp4_expert_layer for a FusedMoE prefix of
// a model of layers decoder layers: the prefix becomes layers.N.ffn.experts
// (mtp.K.ffn.experts past the decoder layers) and is NVFP4 unless an ignore
// pattern matches it (fnmatch.fnmatchcase).
func vllmExpertLayer(prefix string, layers int, ignore []string) bool {
	m := regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.ffn\.experts$`).FindStringSubmatch(prefix)
	if m == nil {
		return false
	}
	i, _ := strconv.Atoi(m[1])
	name := "layers." + m[1] + ".ffn.experts"
	if i >= layers {
		name = "mtp." + strconv.Itoa(i-layers) + ".ffn.experts"
	}
	for _, p := range ignore {
		if ok, _ := path.Match(p, name); ok {
			return false
		}
	}
	return true
}

// e2m1 are FP4's values by code.
var e2m1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, -0, -0.5, -1, -1.5, -2, -3, -4, -6}

// e4m3 decodes an E4M3 byte (no infinities; 0x7F and 0xFF are NaN).
func e4m3(b byte) float32 {
	s := float32(1)
	if b&0x80 != 0 {
		s = -1
	}
	e, m := int(b>>3&0xF), float64(b&7)
	if e == 15 && m == 7 {
		return float32(math.NaN())
	}
	if e == 0 {
		return s * float32(math.Ldexp(m/8, -6))
	}
	return s * float32(math.Ldexp(1+m/8, e-7))
}

// TestLoaderContract checks every rule of the contract on nvfp4/ of v4-tiny
// and v41-tiny, with the MTP experts left MXFP4 (the default) and
// converted (--nvfp4-mtp).
func TestLoaderContract(t *testing.T) {
	for _, preset := range []string{"v4-tiny", "v41-tiny"} {
		src := filepath.Join(t.TempDir(), preset)
		if err := synth.Write(preset, src); err != nil {
			t.Fatal(err)
		}
		for _, mtp := range []bool{false, true} {
			t.Run(preset+"/mtp="+strconv.FormatBool(mtp), func(t *testing.T) {
				args := []string{"--views", "nvfp4"}
				if mtp {
					args = append(args, "--nvfp4-mtp")
				}
				m := startMount(t, src, args...)
				checkContract(t, src, m.path("nvfp4"), mtp)
			})
		}
	}
}

func checkContract(t *testing.T, src, view string, mtp bool) {
	cat, err := checkpoint.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer cat.Close()

	// 1. config.json: the source's FP8 settings and the contract's keys.
	var cfg, srcCfg map[string]any
	catJSON(t, filepath.Join(view, "config.json"), &cfg)
	if err := json.Unmarshal(cat.ConfigBytes, &srcCfg); err != nil {
		t.Fatal(err)
	}
	q, _ := cfg["quantization_config"].(map[string]any)
	for k, v := range srcCfg["quantization_config"].(map[string]any) {
		if k != "expert_dtype" && !jsonEqual(q[k], v) {
			t.Errorf("quantization_config.%s = %v, the source's %v", k, q[k], v)
		}
	}
	for k, want := range map[string]any{"quant_method": "fp8", "quant_algo": "MIXED_PRECISION", "moe_quant_algo": "NVFP4",
		"expert_dtype": "fp4", "group_size": 16.0, "kv_cache_quant_algo": nil} {
		if got, ok := q[k]; !ok || got != want {
			t.Errorf("quantization_config.%s = %v, want %v", k, got, want)
		}
	}
	if _, ok := q["activation_scheme"]; !ok {
		t.Error("quantization_config has no activation_scheme (vLLM's Fp8Config needs one)")
	}
	if p, _ := q["producer"].(map[string]any); p["name"] != "dsfs" || p["version"] == "" {
		t.Errorf("producer %v", q["producer"])
	}
	if _, ok := srcCfg["expert_dtype"]; ok && cfg["expert_dtype"] != "fp4" {
		t.Errorf("top-level expert_dtype %v, want fp4", cfg["expert_dtype"])
	}
	var ignore []string
	for _, p := range q["ignore"].([]any) {
		ignore = append(ignore, p.(string))
	}

	// 2. hf_quant_config.json: the same in ModelOpt's nested form.
	var hq struct {
		Producer     map[string]any `json:"producer"`
		Quantization struct {
			Algo    string         `json:"quant_algo"`
			KV      any            `json:"kv_cache_quant_algo"`
			Group   int            `json:"group_size"`
			Layers  map[string]any `json:"quantized_layers"`
			Exclude []string       `json:"exclude_modules"`
		} `json:"quantization"`
	}
	catJSON(t, filepath.Join(view, "hf_quant_config.json"), &hq)
	hqq := hq.Quantization
	if hqq.Algo != "MIXED_PRECISION" || hqq.KV != nil || hqq.Group != 16 || hq.Producer["name"] != "dsfs" ||
		strings.Join(hqq.Exclude, ",") != strings.Join(ignore, ",") || !jsonEqual(hqq.Layers, q["quantized_layers"]) {
		t.Errorf("hf_quant_config.json %+v, config.json's ignore %v", hq, ignore)
	}
	if inIgnore := slices.Contains(ignore, "mtp.*"); inIgnore == mtp {
		t.Errorf("ignore %v with --nvfp4-mtp %v", ignore, mtp)
	}

	// 3-5. The tensors, shard by shard.
	files := map[string]map[string]readTensor{}
	tensor := func(shard, name string) (readTensor, bool) {
		if files[shard] == nil {
			files[shard] = readSafetensors(t, filepath.Join(view, shard))
		}
		rt, ok := files[shard][name]
		return rt, ok
	}
	converted, kept, layers := 0, 0, map[string]bool{}
	for _, w := range cat.Tensors {
		if w.Format != checkpoint.FormatMXFP4 || w.Scale == nil || (w.Role != checkpoint.RoleRoutedExpert && w.Role != checkpoint.RoleMTPExpert) {
			continue
		}
		b := strings.TrimSuffix(w.Name, ".weight")
		module := b[:strings.LastIndex(b, ".ffn.experts.")] + ".ffn.experts"
		source := make([]byte, w.Size)
		if _, err := w.ReadAt(source, 0); err != nil {
			t.Fatal(err)
		}
		scale := make([]byte, w.Scale.Size)
		if _, err := w.Scale.ReadAt(scale, 0); err != nil {
			t.Fatal(err)
		}
		nvfp4 := w.Role == checkpoint.RoleRoutedExpert || mtp
		if got := vllmExpertLayer(vllmPrefix(module, cat.Config.NumLayers), cat.Config.NumLayers, ignore); got != nvfp4 {
			t.Errorf("vLLM would take %s as NVFP4: %v, want %v", module, got, nvfp4)
		}
		if got := matchesAny(b, ignore); got == nvfp4 {
			t.Errorf("%s: ignored %v, NVFP4 %v", b, got, nvfp4)
		}
		if !nvfp4 {
			kept++
			ww, ok1 := tensor(w.Shard.Name, w.Name)
			ss, ok2 := tensor(w.Scale.Shard.Name, w.Scale.Name)
			if !ok1 || !ok2 || !bytes.Equal(ww.data, source) || !bytes.Equal(ss.data, scale) || ww.meta.DType != w.DType || ss.meta.DType != safetensors.F8E8M0 {
				t.Fatalf("%s: not kept MXFP4 byte for byte", b)
			}
			if _, ok := tensor(w.Shard.Name, b+".weight_scale"); ok {
				t.Fatalf("%s: kept MXFP4 and given a weight_scale", b)
			}
			continue
		}
		converted++
		layers[module] = true
		n, k2 := w.Shape[0], w.Shape[1] // [N, K/2] bytes
		ww, _ := tensor(w.Shard.Name, b+".weight")
		ws, _ := tensor(w.Shard.Name, b+".weight_scale")
		g2, _ := tensor(w.Shard.Name, b+".weight_scale_2")
		in, _ := tensor(w.Shard.Name, b+".input_scale")
		if ww.meta.DType != safetensors.U8 || !sameShape(ww.meta.Shape, n, k2) || !bytes.Equal(ww.data, source) ||
			ws.meta.DType != safetensors.F8E4M3 || !sameShape(ws.meta.Shape, n, 2*k2/16) ||
			g2.meta.DType != safetensors.F32 || len(g2.meta.Shape) != 0 || in.meta.DType != safetensors.F32 || len(in.meta.Shape) != 0 {
			t.Fatalf("%s: weight %v %v, weight_scale %v %v, weight_scale_2 %v %v, input_scale %v %v", b,
				ww.meta.DType, ww.meta.Shape, ws.meta.DType, ws.meta.Shape, g2.meta.DType, g2.meta.Shape, in.meta.DType, in.meta.Shape)
		}
		if _, ok := tensor(w.Shard.Name, w.Scale.Name); ok {
			t.Fatalf("%s: the MXFP4 .scale is still served beside the NVFP4 tensors", w.Scale.Name)
		}
		if v := f32(in.data); v != 1 {
			t.Fatalf("%s.input_scale = %v, want 1.0 without calibration", b, v)
		}
		// The NVFP4 decode is the MXFP4 decode, bit for bit, wherever the
		// block's scale ratio lies in E4M3's range.
		gs := f32(g2.data)
		row := 2 * k2 / 16 // weight_scale bytes a row
		for r := range n {
			for c := range 2 * k2 { // element c of row r
				code := source[r*k2+c/2] >> (4 * (c % 2)) & 0xF
				e := scale[int(r)*int(k2)/16+int(c)/32]
				if e == 255 {
					continue
				}
				mx := e2m1[code] * float32(math.Ldexp(1, int(e)-127))
				nv := e2m1[code] * e4m3(ws.data[int(r)*int(row)+int(c)/16]) * gs
				ratio := float64(e) - 127 - math.Log2(float64(gs))
				if ratio >= -9 && ratio <= 8 && mx != nv {
					t.Fatalf("%s[%d, %d]: NVFP4 %v, MXFP4 %v", b, r, c, nv, mx)
				}
			}
		}
		// w1 and w3 of one expert: one weight_scale_2 and one input_scale.
		if strings.HasSuffix(b, ".w1") {
			b3 := strings.TrimSuffix(b, "w1") + "w3"
			for _, s := range []string{".weight_scale_2", ".input_scale"} {
				x1, _ := tensor(w.Shard.Name, b+s)
				x3, ok := tensor(cat.Tensor(b3+".weight").Shard.Name, b3+s)
				if !ok || !bytes.Equal(x1.data, x3.data) {
					t.Fatalf("%s and %s: %s differ", b, b3, s)
				}
			}
		}
	}
	if converted == 0 || (kept == 0) == !mtp || len(layers) != len(hqq.Layers) {
		t.Errorf("%d matrices converted in %d layers (quantized_layers %d), %d kept MXFP4", converted, len(layers), len(hqq.Layers), kept)
	}
	// Every module that is not NVFP4 is ignored.
	for _, tt := range cat.Tensors {
		if m := strings.TrimSuffix(tt.Name, ".weight"); m != tt.Name && !matchesAny(m, ignore) {
			if tt.Format == checkpoint.FormatMXFP4 && (tt.Role == checkpoint.RoleRoutedExpert || mtp && tt.Role == checkpoint.RoleMTPExpert) {
				continue
			}
			t.Errorf("module %s is not NVFP4 and no ignore pattern names it", m)
		}
	}
}

// vllmPrefix is the FusedMoE prefix vLLM builds for an expert module:
// the MTP blocks' past the decoder layers.
func vllmPrefix(module string, layers int) string {
	if rest, ok := strings.CutPrefix(module, "mtp."); ok {
		k, _ := strconv.Atoi(rest[:strings.IndexByte(rest, '.')])
		return "model.layers." + strconv.Itoa(layers+k) + ".ffn.experts"
	}
	return "model." + module
}

func matchesAny(name string, patterns []string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, name); ok {
			return true
		}
	}
	return false
}

func sameShape(s []int64, want ...int64) bool {
	if len(s) != len(want) {
		return false
	}
	for i := range s {
		if s[i] != want[i] {
			return false
		}
	}
	return true
}

func f32(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestLoaderCalibration mounts the reference checkpoints of testdata/trace
// with their golden sequences as --nvfp4-calibrate prompts and checks every
// expert's input_scale against amax/(6·448) recomputed from the golden
// chain of DeepSeek's code (the rows routed to each expert entering w1/w3,
// the routed w2 inputs), unreached experts taking the layer's largest,
// then remounts with the same --cache-dir: the calibration comes from the
// disk cache, with the same values.
func TestLoaderCalibration(t *testing.T) {
	for _, name := range []string{"v4-tiny", "v41-tiny"} {
		t.Run(name, func(t *testing.T) {
			var g struct {
				Sequences []struct {
					TokenIDs []int `json:"token_ids"`
					Modes    map[string]struct {
						Layers []struct {
							FFNIn      goldenArray `json:"ffn_in"`
							RoutedW2In goldenArray `json:"routed_w2_in"`
							Route      struct {
								IDs goldenArray `json:"ids"`
							} `json:"route"`
						} `json:"layers"`
					} `json:"modes"`
				} `json:"sequences"`
			}
			dir := testdata.TraceGolden(t, name, &g)
			var prompts []map[string]any
			for i, s := range g.Sequences {
				prompts = append(prompts, map[string]any{"id": "s" + strconv.Itoa(i), "token_ids": s.TokenIDs})
			}
			pf := writePrompts(t, prompts)
			raw, _ := os.ReadFile(pf)
			sum := sha256.Sum256(raw)
			cacheDir := t.TempDir()
			for pass, want := range []string{"done", "done (disk cache)"} {
				m := startMount(t, dir, "--views", "nvfp4", "--nvfp4-calibrate", pf, "--cache-dir", cacheDir)
				cat, err := checkpoint.Open(dir)
				if err != nil {
					t.Fatal(err)
				}
				checked := 0
				for l, gl := range g.Sequences[0].Modes["a8"].Layers {
					experts := 0
					for _, tt := range cat.Tensors {
						if tt.Layer == l && tt.Role == checkpoint.RoleRoutedExpert {
							experts = max(experts, tt.Expert+1)
						}
					}
					in, mid := make([]float64, experts), make([]float64, experts)
					for _, s := range g.Sequences {
						sl := s.Modes["a8"].Layers[l]
						x, w2, ids := sl.FFNIn.f32(), sl.RoutedW2In.f32(), sl.Route.IDs.i32()
						k, d, inter := sl.Route.IDs.Shape[1], gl.FFNIn.Shape[1], gl.RoutedW2In.Shape[2]
						for tok := range sl.Route.IDs.Shape[0] {
							for j := range k {
								e := ids[tok*k+j]
								for _, v := range x[tok*d : (tok+1)*d] {
									in[e] = math.Max(in[e], math.Abs(float64(v)))
								}
								for _, v := range w2[(tok*k+j)*inter : (tok*k+j+1)*inter] {
									mid[e] = math.Max(mid[e], math.Abs(float64(v)))
								}
							}
						}
					}
					layerMax := [2]float64{}
					for e := range experts {
						layerMax[0], layerMax[1] = math.Max(layerMax[0], in[e]), math.Max(layerMax[1], mid[e])
					}
					for _, tt := range cat.Tensors {
						if tt.Layer != l || tt.Role != checkpoint.RoleRoutedExpert || tt.Scale == nil {
							continue
						}
						b := strings.TrimSuffix(tt.Name, ".weight")
						v := float64(f32(readSafetensors(t, m.path("nvfp4", tt.Shard.Name))[b+".input_scale"].data))
						amax, fallback := in[tt.Expert], layerMax[0]
						if tt.Proj == "w2" {
							amax, fallback = mid[tt.Expert], layerMax[1]
						}
						if amax == 0 {
							amax = fallback
						}
						if want := amax / (6 * 448); math.Abs(v-want) > 1e-4*want {
							t.Fatalf("%s.input_scale = %g, the golden chain gives %g", b, v, want)
						}
						checked++
					}
				}
				cat.Close()
				if checked == 0 {
					t.Fatal("no input_scale checked")
				}
				var hq struct {
					Calibration struct {
						SHA string `json:"prompts_sha256"`
					} `json:"calibration"`
				}
				catJSON(t, m.path("nvfp4", "hf_quant_config.json"), &hq)
				if hq.Calibration.SHA != hex.EncodeToString(sum[:]) {
					t.Errorf("hf_quant_config.json records prompts %q", hq.Calibration.SHA)
				}
				var st struct {
					ViewStats struct {
						NVFP4 struct {
							Calibration struct {
								State   string `json:"state"`
								Reached int    `json:"experts_reached"`
							} `json:"calibration"`
						} `json:"nvfp4"`
					} `json:"view_stats"`
				}
				catJSON(t, m.path(".dsfs", "stats.json"), &st)
				if c := st.ViewStats.NVFP4.Calibration; c.State != want || c.Reached == 0 {
					t.Errorf("pass %d: calibration %+v, want state %q", pass, c, want)
				}
				m.stop(t)
			}
		})
	}
}

// TestLoaderCalibrationRefused: a prompts file that cannot be used gives
// one log line naming it and the reason; nvfp4/ holds ERROR.txt, and the
// mount serves the other views.
func TestLoaderCalibrationRefused(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "prompts.json")
	if err := os.WriteFile(bad, []byte(`[{"id": "x", "token_ids": [1]}, {"id": "x", "token_ids": [2]}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	m := startMount(t, tinySrc, "--views", "nvfp4,source", "--nvfp4-calibrate", bad)
	lines := m.log.linesWith("nvfp4/ cannot calibrate with --nvfp4-calibrate " + bad)
	if len(lines) != 1 {
		t.Fatalf("%d log lines name the prompts file:\n%s", len(lines), m.log)
	}
	b, err := os.ReadFile(m.path("nvfp4", "ERROR.txt"))
	if err != nil || !strings.Contains(string(b), "id already used") {
		t.Fatalf("nvfp4/ERROR.txt (%v): %s", err, b)
	}
	if _, err := os.ReadFile(m.path("source", "config.json")); err != nil {
		t.Fatalf("source/ is not served: %v", err)
	}
}
