package checkpoint

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dsfs/dsfs/safetensors"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Config // Raw is not compared
		errs []string
	}{
		{"v4.1", `{"model_type": "deepseek_v41", "architectures": ["DeepseekV41ForCausalLM"],
			"num_hidden_layers": 43, "hidden_size": 5120, "n_routed_experts": 384, "num_nextn_predict_layers": 3,
			"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "weight_block_size": [32, 32],
			"scale_fmt": "ue8m0", "expert_dtype": "fp4"}}`,
			Config{Family: DeepSeekV41, ModelType: "deepseek_v41", Architectures: []string{"DeepseekV41ForCausalLM"}, NumLayers: 43, HiddenSize: 5120,
				RoutedExperts: 384, MTPLayers: 3, TorchDType: "bfloat16",
				Quant: QuantConfig{Method: "fp8", WeightBlockSize: [2]int64{32, 32}, ScaleFmt: "ue8m0", ExpertDType: "fp4"}}, nil},
		{"deepseek inference names", `{"n_layers": 61, "dim": 7168, "n_mtp_layers": 1, "dtype": "fp8"}`,
			Config{NumLayers: 61, HiddenSize: 7168, MTPLayers: 1, TorchDType: "fp8"}, nil},
		{"expert_dtype at the top level (V4)", `{"expert_dtype": "fp4", "quantization_config": {"quant_method": "fp8"}}`,
			Config{Quant: QuantConfig{Method: "fp8", ExpertDType: "fp4"}}, nil},
		{"text_config", `{"model_type": "deepseek_v41", "text_config": {"model_type": "inner", "num_hidden_layers": 43,
			"quantization_config": {"weight_block_size": [32, 32]}}}`,
			Config{Family: DeepSeekV41, ModelType: "deepseek_v41", NumLayers: 43, Quant: QuantConfig{WeightBlockSize: [2]int64{32, 32}}}, nil},
		{"nulls are absent", `{"num_hidden_layers": null, "n_layers": 4, "quantization_config": null}`, Config{NumLayers: 4}, nil},
		{"wrong types", `{"model_type": 3, "architectures": ["a", 1], "num_hidden_layers": 61.5, "hidden_size": -1,
			"n_routed_experts": "384", "num_nextn_predict_layers": 1e1, "quantization_config": {"weight_block_size": [128],
			"quant_method": ["fp8"]}}`,
			Config{},
			[]string{`model_type: want a string, got 3`, `architectures: want a list of strings, got ["a",1]`,
				`num_hidden_layers: want a non-negative integer, got 61.5`, `hidden_size: want a non-negative integer, got -1`,
				`n_routed_experts: want a non-negative integer, got "384"`, `num_nextn_predict_layers: want a non-negative integer, got 1e1`,
				`quantization_config.quant_method: want a string, got ["fp8"]`,
				`quantization_config.weight_block_size: want two positive integers, got [128]`}},
		{"zero block", `{"quantization_config": {"weight_block_size": [0, 32]}}`, Config{},
			[]string{`quantization_config.weight_block_size: want two positive integers, got [0,32]`}},
		{"quantization_config not an object", `{"quantization_config": "fp8", "num_hidden_layers": 2}`, Config{NumLayers: 2},
			[]string{`quantization_config: want an object, got "fp8"`}},
		{"huge integer", `{"num_hidden_layers": 99999999999999999999999}`, Config{},
			[]string{`num_hidden_layers: want a non-negative integer, got 99999999999999999999999`}},
		{"not JSON", `{"model_type": "x",}`, Config{}, []string{"not a JSON object: invalid character '}'"}},
		{"array", `[1, 2]`, Config{}, []string{"not a JSON object: json: cannot unmarshal array"}},
		{"null", `null`, Config{}, []string{"not a JSON object: null"}},
		{"trailing data", `{} {}`, Config{}, []string{"not a JSON object: trailing data after the object"}},
		{"empty", ``, Config{}, []string{"not a JSON object: EOF"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, errs := parseConfig([]byte(tt.in))
			g := *got
			g.Raw = nil
			if fmt.Sprintf("%+v", g) != fmt.Sprintf("%+v", tt.want) {
				t.Errorf("config\n%+v, want\n%+v", g, tt.want)
			}
			var msgs []string
			for _, e := range errs {
				msgs = append(msgs, e.Error())
			}
			if len(msgs) != len(tt.errs) {
				t.Fatalf("errors %q, want %q", msgs, tt.errs)
			}
			for i := range msgs {
				if !strings.HasPrefix(msgs[i], tt.errs[i]) {
					t.Errorf("error %q, want %q", msgs[i], tt.errs[i])
				}
			}
			if (got.Raw == nil) != strings.HasPrefix(strings.Join(tt.errs, ""), "not a JSON object") {
				t.Errorf("Raw %v after errors %q", got.Raw, msgs)
			}
		})
	}
	if _, err := ParseConfig([]byte(`{"num_hidden_layers": "x", "hidden_size": "y"}`)); err == nil ||
		!strings.Contains(err.Error(), "num_hidden_layers") || !strings.Contains(err.Error(), "hidden_size") {
		t.Errorf("ParseConfig error %v, want both fields named", err)
	}
}

func TestPatchConfig(t *testing.T) {
	const src = `{"model_type":"deepseek_v41","rms_norm_eps":1e-06,"big":16000000,"note":"<a&b> é",
"quantization_config":{"quant_method":"fp8","weight_block_size":[32,32],"expert_dtype":"fp4"},"empty":{},"list":[]}`
	tests := []struct {
		name  string
		in    string
		path  []string
		value any
		want  string
		err   string
	}{
		{"expert dtype", src, []string{"quantization_config", "expert_dtype"}, "nvfp4", `{
  "big": 16000000,
  "empty": {},
  "list": [],
  "model_type": "deepseek_v41",
  "note": "<a&b> é",
  "quantization_config": {
    "expert_dtype": "nvfp4",
    "quant_method": "fp8",
    "weight_block_size": [
      32,
      32
    ]
  },
  "rms_norm_eps": 1e-06
}
`, ""},
		{"new nested key", `{"a":1}`, []string{"quantization_config", "engram_dtype"}, "fp4", `{
  "a": 1,
  "quantization_config": {
    "engram_dtype": "fp4"
  }
}
`, ""},
		{"null parent replaced", `{"q":null}`, []string{"q", "k"}, 1, "{\n  \"q\": {\n    \"k\": 1\n  }\n}\n", ""},
		{"top-level key", `{"a":1}`, []string{"a"}, []int{2}, "{\n  \"a\": [\n    2\n  ]\n}\n", ""},
		// A struct's fields come out sorted, as they would after any
		// later patch, so the bytes do not depend on the patches' order.
		{"struct value", `{"a":1}`, []string{"p"}, struct {
			Name    string `json:"name"`
			Version string `json:"version"`
			Codec   string `json:"codec"`
		}{"dsfs", "v1", "3"}, "{\n  \"a\": 1,\n  \"p\": {\n    \"codec\": \"3\",\n    \"name\": \"dsfs\",\n    \"version\": \"v1\"\n  }\n}\n", ""},
		{"parent not an object", `{"q":"fp8"}`, []string{"q", "k"}, 1, "", `q is "fp8", not an object`},
		{"deep parent not an object", `{"q":{"r":[1]}}`, []string{"q", "r", "k"}, 1, "", `q.r is [1], not an object`},
		{"empty path", `{}`, nil, 1, "", "empty key path"},
		{"not JSON", `{`, []string{"a"}, 1, "", "not a JSON object"},
		{"value that does not encode", `{}`, []string{"a"}, func() {}, "", "unsupported type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PatchConfig([]byte(tt.in), tt.path, tt.value)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("got\n%s\nwant\n%s", got, tt.want)
			}
			again, err := PatchConfig(got, tt.path, tt.value)
			if err != nil || string(again) != string(got) {
				t.Errorf("patching the output again changed it:\n%s", again)
			}
		})
	}
	var doc map[string]any
	out, _ := PatchConfig([]byte(src), []string{"quantization_config", "expert_dtype"}, "nvfp4")
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("output does not parse: %v", err)
	}
}

// TestCountsAgainstTensors: a count in config.json beyond the tensors is
// one problem naming the key, whatever its size, found in time
// proportional to the tensors.
func TestCountsAgainstTensors(t *testing.T) {
	tensors := []safetensors.Spec{
		spec("layers.0.attn_norm.weight", safetensors.BF16, 4),
		spec("layers.1.ffn.experts.0.w1.weight", safetensors.BF16, 4, 4),
		spec("layers.1.ffn.experts.1.w1.weight", safetensors.BF16, 4, 4),
		spec("mtp.0.attn_norm.weight", safetensors.BF16, 4),
	}
	tests := []struct {
		config map[string]any
		want   []string
	}{
		{map[string]any{"num_hidden_layers": 2, "n_routed_experts": 2, "num_nextn_predict_layers": 1}, nil},
		// Fewer than the tensors show is classify's business (MTP from layers.L).
		{map[string]any{"num_hidden_layers": 1}, nil},
		{map[string]any{"num_hidden_layers": 100000}, []string{"config.json: num_hidden_layers 100000, but the shards hold tensors for 2 layers"}},
		{map[string]any{"num_hidden_layers": 1000000000, "n_routed_experts": 1 << 40, "num_nextn_predict_layers": 1000000}, []string{
			"config.json: n_routed_experts 1099511627776, but the shards hold tensors for 2 routed experts",
			"config.json: num_hidden_layers 1000000000, but the shards hold tensors for 2 layers",
			"config.json: num_nextn_predict_layers 1000000, but the shards hold tensors for 1 MTP blocks",
		}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.config), func(t *testing.T) {
			dir := t.TempDir()
			writeShard(t, dir, "model.safetensors", tensors...)
			writeJSON(t, dir, ConfigName, tt.config)
			var got []string
			for _, p := range mustOpen(t, dir).Problems {
				got = append(got, p.String())
			}
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}

// TestParseConfigs reads DeepSeek-V4.1's two config files: the nested
// Hugging Face config.json first, inference/config.json for what it lacks,
// and a count the two give differently is an error naming both.
func TestParseConfigs(t *testing.T) {
	hf := `{"model_type": "deepseek_v41", "quantization_config": {"quant_method": "fp8", "expert_dtype": "fp4"},
		"text_config": {"num_hidden_layers": 40, "hidden_size": 5120, "n_routed_experts": 384}}`
	tests := []struct {
		name, hf, args string
		want           Config
		errs           []string
	}{
		{"agree", hf, `{"n_layers": 40, "dim": 5120, "n_mtp_layers": 3, "expert_dtype": "fp4"}`,
			Config{Family: DeepSeekV41, ModelType: "deepseek_v41", NumLayers: 40, HiddenSize: 5120, RoutedExperts: 384, MTPLayers: 3,
				Quant: QuantConfig{Method: "fp8", ExpertDType: "fp4"}}, nil},
		{"inference only", "", `{"n_layers": 43, "dim": 4096, "n_routed_experts": 256, "expert_dtype": "fp4"}`,
			Config{NumLayers: 43, HiddenSize: 4096, RoutedExperts: 256, Quant: QuantConfig{ExpertDType: "fp4"}}, nil},
		{"disagree", hf, `{"n_layers": 43, "dim": 5120, "expert_dtype": "nvfp4"}`,
			Config{Family: DeepSeekV41, ModelType: "deepseek_v41", NumLayers: 40, HiddenSize: 5120, RoutedExperts: 384,
				Quant: QuantConfig{Method: "fp8", ExpertDType: "fp4"}},
			[]string{`inference/config.json: n_layers 43, but config.json says 40`,
				`inference/config.json: expert_dtype "nvfp4", but config.json says "fp4"`}},
		{"inference not JSON", hf, `{"n_layers": `,
			Config{Family: DeepSeekV41, ModelType: "deepseek_v41", NumLayers: 40, HiddenSize: 5120, RoutedExperts: 384,
				Quant: QuantConfig{Method: "fp8", ExpertDType: "fp4"}},
			[]string{`inference/config.json: not a JSON object`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hf []byte
			if tt.hf != "" {
				hf = []byte(tt.hf)
			}
			got, errs := parseConfigs(hf, []byte(tt.args))
			got.Raw, got.Inference = nil, nil
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("got %+v\nwant %+v", *got, tt.want)
			}
			if len(errs) != len(tt.errs) {
				t.Fatalf("errors %v, want %d", errs, len(tt.errs))
			}
			for i, e := range errs {
				if !strings.HasPrefix(e.Error(), tt.errs[i]) {
					t.Errorf("error %q, want %q", e, tt.errs[i])
				}
			}
		})
	}
}

func TestQuantPatch(t *testing.T) {
	for _, tt := range []struct {
		name      string
		config    string
		converted int
		want      map[string]any
	}{
		{"converted", `{"quantization_config": {"quant_method": "fp8"}}`, 3, map[string]any{"quantization_config.expert_dtype": "nvfp4"}},
		{"nothing converted", `{"quantization_config": {"quant_method": "fp8"}}`, 0, nil},
		{"no quantization_config", `{"model_type": "deepseek_v2"}`, 3, nil},
		{"no quant_method", `{"quantization_config": {"weight_block_size": [128, 128]}}`, 3, nil},
		{"quant_method not a string", `{"quantization_config": {"quant_method": 8}}`, 3, nil},
		{"quantization_config null", `{"quantization_config": null}`, 3, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _ := ParseConfig([]byte(tt.config))
			got := cfg.QuantPatch(tt.converted, "expert_dtype", "nvfp4")
			if !maps.Equal(got, tt.want) {
				t.Errorf("patch = %v, want %v (keys %v)", got, tt.want, slices.Sorted(maps.Keys(got)))
			}
		})
	}
}

func TestFamily(t *testing.T) {
	for _, tt := range []struct {
		name, config string
		want         Family
	}{
		{"V4.1 release", `{"model_type": "deepseek_v41", "text_config": {"model_type": "deepseek_v41_text", "hc_mult": 4, "compress_ratios": [4]}}`, DeepSeekV41},
		{"V4.1 inference args", `{"hc_mult": 4, "kv_source_layer_ids": [0, 1], "compress_ratios": [4]}`, DeepSeekV41},
		{"V4 release", `{"model_type": "deepseek_v4", "hc_mult": 4, "compress_ratios": [0, 4]}`, DeepSeekV4},
		{"V4 keys without model_type", `{"hc_mult": 4, "compress_ratios": [0, 4]}`, DeepSeekV4},
		{"V4 with Engram but no V4.1 attention", `{"model_type": "deepseek_v4", "hc_mult": 4, "engram_layer_ids": [1]}`, DeepSeekV4},
		{"V3", `{"model_type": "deepseek_v3"}`, DeepSeekV3},
		{"V3.2", `{"model_type": "deepseek_v32", "index_n_heads": 64}`, DeepSeekV3},
		{"V2-Lite", `{"model_type": "deepseek_v2"}`, DeepSeekV2},
		{"ModelArgs", `{"dim": 7168, "n_routed_experts": 256}`, FamilyOther},
		{"another model", `{"model_type": "llama"}`, FamilyOther},
	} {
		c, err := ParseConfig([]byte(tt.config))
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if c.Family != tt.want {
			t.Errorf("%s: family %q, want %q", tt.name, c.Family, tt.want)
		}
	}
}
