package v4

import (
	"fmt"
	"github.com/dsfs/dsfs/checkpoint"
	"strings"
	"testing"
)

// released41HF and released41Inference are DeepSeek-V4.1-Flash's
// config.json (the model under text_config) and inference/config.json,
// as published header audits quote them (docs: LAYOUTS.md §2).
const (
	released41HF        = `{"architectures":["DeepseekV41ForCausalLM"],"model_type":"deepseek_v41","dtype":"bfloat16","transformers_version":"5.6.0","bos_token_id":0,"eos_token_id":1,"pad_token_id":2,"image_token_id":129264,"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic","weight_block_size":[32,32],"scale_fmt":"ue8m0","expert_dtype":"fp4"},"text_config":{"model_type":"deepseek_v41_text","vocab_size":129280,"hidden_size":5120,"moe_intermediate_size":2304,"num_hidden_layers":40,"num_attention_heads":64,"num_key_value_heads":1,"head_dim":512,"qk_rope_head_dim":64,"q_lora_rank":1280,"o_lora_rank":1024,"o_groups":8,"hidden_act":"silu","swiglu_limit":10.0,"rms_norm_eps":1e-20,"attention_bias":false,"attention_dropout":0.0,"initializer_range":0.02,"use_cache":true,"tie_word_embeddings":false,"max_position_embeddings":1048576,"rope_theta":10000,"rope_scaling":{"rope_type":"yarn","factor":16,"beta_fast":32,"beta_slow":1,"original_max_position_embeddings":65536},"n_routed_experts":384,"n_shared_experts":1,"num_experts_per_tok":6,"scoring_func":"sqrtsoftplus","topk_method":"noaux_tc","norm_topk_prob":true,"routed_scaling_factor":1.5,"sliding_window":128,"compress_ratios":[0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0],"compress_rope_theta":160000,"kv_source_layer_ids":[2,8,14,20],"index_source_layer_ids":[2,8,14,20,24,28,32,36],"index_n_heads":32,"index_head_dim":128,"index_topk":512,"candidate_source_layer_id":20,"candidate_topk_blocks":2048,"candidate_block_size":8,"hc_mult":4,"hc_sinkhorn_iters":20,"hc_eps":1e-06,"engram_layer_ids":[1,14],"engram_num_embeddings":[384006168,384016682],"engram_max_ngram_size":4,"engram_vocab_size":16000000,"engram_n_heads":8,"engram_head_dim":256,"engram_pad_token_id":2,"engram_compressed_vocab_size":99092,"num_nextn_predict_layers":3,"dspark_block_size":5,"dspark_noise_token_id":128799,"dspark_target_layer_ids":[37,38,39],"dspark_markov_rank":256,"dspark_n_routed_experts":128,"dspark_num_experts_per_tok":3},"vision_config":{"model_type":"deepseek_v41_vision","num_hidden_layers":32,"hidden_size":1024,"num_attention_heads":16,"intermediate_size":2816,"patch_size":14,"rope_theta":10000,"downsample_ratio":3,"max_image_tokens":1024,"min_pixels":295936,"max_wh_ratio":null}}`
	released41Inference = `{"vocab_size":129280,"dim":5120,"moe_inter_dim":2304,"n_layers":40,"n_mtp_layers":3,"dspark_block_size":5,"dspark_noise_token_id":128799,"dspark_target_layer_ids":[37,38,39],"dspark_markov_rank":256,"dspark_n_routed_experts":128,"dspark_n_activated_experts":3,"n_heads":64,"n_routed_experts":384,"n_shared_experts":1,"n_activated_experts":6,"score_func":"sqrtsoftplus","route_scale":1.5,"swiglu_limit":10.0,"q_lora_rank":1280,"head_dim":512,"rope_head_dim":64,"norm_eps":1e-20,"o_groups":8,"o_lora_rank":1024,"window_size":128,"kv_source_layers":[2,8,14,20],"index_source_layers":[2,8,14,20,24,28,32,36],"original_seq_len":65536,"rope_theta":10000,"rope_factor":16,"beta_fast":32,"beta_slow":1,"index_n_heads":32,"index_head_dim":128,"index_topk":512,"candidate_source_layer":20,"candidate_topk_blocks":2048,"candidate_block_size":8,"hc_mult":4,"hc_sinkhorn_iters":20,"hc_eps":1e-06,"engram_layer_ids":[1,14],"engram_vocab_size":16000000,"engram_num_embeddings":[384006168,384016682],"engram_max_ngram_size":4,"engram_pad_id":2,"engram_compressed_vocab_size":99092,"dtype":"fp8","expert_dtype":"fp4","compress_rope_theta":160000,"compress_ratios":[0,0,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,2,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,0,0,0],"vision_n_layers":32,"vision_dim":1024,"vision_n_heads":16,"vision_inter_dim":2816,"vision_patch_size":14,"vision_downsample_ratio":3,"vision_max_n_token":1024,"vision_min_pixels":295936,"vision_max_wh_ratio":null,"image_token_id":129264,"engram_n_heads":8,"engram_head_dim":256,"vision_rope_theta":10000}`
)

// TestConfig41Released derives the released schedule (V4.md §3.7) from
// each file alone and from both.
func TestConfig41Released(t *testing.T) {
	want := map[int]string{0: RoleSWA, 1: RoleSWA, 2: RoleFull, 8: RoleFull, 14: RoleFull, 20: RoleFull,
		24: RoleReindex, 28: RoleReindex, 32: RoleReindex, 36: RoleReindex}
	for _, tc := range []struct {
		name     string
		hf, args []byte
	}{
		{"config.json", []byte(released41HF), nil},
		{"both", []byte(released41HF), []byte(released41Inference)},
		{"inference/config.json", []byte(`{"text_config":{}}`), []byte(released41Inference)},
	} {
		c, err := ParseConfig41(tc.hf, tc.args)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if c.Layers != 40 || c.MTPLayers != 3 || c.FP8Block != 32 || c.NormEps != 1e-20 || c.CandidateSource != 20 ||
			c.CandidateTopKBlocks != 2048 || c.CandidateBlockSize != 8 || c.EngramCompressedSize != 99092 || c.EngramPadID != 2 ||
			c.RoutedExperts != 384 || c.TopK != 6 || c.GateTemp != 1 || !c.NormTopKProb {
			t.Errorf("%s: settings %+v", tc.name, *c)
		}
		var kinds []string
		for l, r := range c.Roles {
			w, ok := want[l]
			if !ok {
				w = RoleReuse
			}
			if r.Role != w {
				t.Errorf("%s: layer %d is %s, want %s", tc.name, l, r.Role, w)
			}
			kinds = append(kinds, r.Role)
			if r.Engram != (l == 1 || l == 14) || r.CandidateSource != (l == 20) || r.UsesCandidates != (l > 20) {
				t.Errorf("%s: layer %d roles %+v", tc.name, l, r)
			}
		}
		if r := c.Roles[23]; r.ReadsCompressedKVOf != 20 || r.ReadsTopKOf != 20 {
			t.Errorf("%s: layer 23 reads %d and %d, want 20 and 20", tc.name, r.ReadsCompressedKVOf, r.ReadsTopKOf)
		}
		if r := c.Roles[39]; r.ReadsCompressedKVOf != 20 || r.ReadsTopKOf != 36 {
			t.Errorf("%s: layer 39 reads %d and %d, want 20 and 36", tc.name, r.ReadsCompressedKVOf, r.ReadsTopKOf)
		}
		if r := c.Roles[5]; r.ReadsCompressedKVOf != 2 || r.ReadsTopKOf != 2 || r.Ratio != 2 {
			t.Errorf("%s: layer 5 %+v", tc.name, r)
		}
	}
	for _, cfg := range []string{released41HF, released41Inference} {
		if c, err := checkpoint.ParseConfig([]byte(cfg)); err != nil || c.Family != checkpoint.DeepSeekV41 {
			t.Errorf("the released V4.1 config is of family %q (%v)", c.Family, err)
		}
	}
}

// TestConfig41Errors checks that schedules reading state nobody wrote, and
// other inconsistent settings, are refused with the reason.
func TestConfig41Errors(t *testing.T) {
	for _, tc := range []struct{ name, edit, want string }{
		{"reuse first", `"kv_source_layers":[8,14,20]`, "layer 2 (ratio 2) reads a compressed KV, but no kv source precedes it"},
		{"no index", `"index_source_layers":[8,14,20,24,28,32,36]`, "layer 2 (ratio 2) reads compressed picks, but no index source precedes it"},
		{"swa source", `"kv_source_layers":[1,2,8,14,20]`, "layer 1 is a kv or index source but has compress ratio 0"},
		{"candidate", `"candidate_source_layer":21`, "candidate_source_layer 21 is not an index source"},
		{"ratio mix", `"kv_source_layers":[2,8,14]`, "layer 20 has ratio 1 but reads layers 14 and 20 of ratio 2 and 1"},
		{"engram sizes", `"engram_num_embeddings":[384006168]`, "engram_num_embeddings has 1 entries for 2 Engram layers"},
		{"outside", `"engram_layer_ids":[1,40]`, "layer 40 in a source or Engram list is outside [0, 40)"},
		{"gate temp", `"gate_temp":0`, "gate_temp 0 must be positive"},
	} {
		key := tc.edit[:strings.Index(tc.edit, ":")]
		args := released41Inference
		if i := strings.Index(args, key+":"); i >= 0 {
			end := i + len(key) + 1
			depth := 0
			for ; ; end++ {
				switch args[end] {
				case '[':
					depth++
				case ']':
					depth--
				}
				if depth == 0 && (args[end] == ',' || args[end] == '}') {
					break
				}
			}
			args = args[:i] + tc.edit + args[end:]
		} else {
			args = strings.Replace(args, "{", "{"+tc.edit+",", 1)
		}
		_, err := ParseConfig41([]byte(released41HF), []byte(args))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

func ExampleRole41_Describe() {
	c, _ := ParseConfig41([]byte(released41HF), nil)
	for _, l := range []int{1, 2, 3, 20, 24, 25} {
		fmt.Printf("%d: %s\n", l, c.Role(l))
	}
	// Output:
	// 1: sliding window only, Engram
	// 2: CSA2 full (ratio 2: own compressor and index keys)
	// 3: CSA2 reuse (ratio 2: layer 2's picks)
	// 20: CSA2 full (ratio 1: own compressor and index keys), candidate source
	// 24: CSA2 reindex (ratio 1: own indexer over layer 20's keys), within the candidates
	// 25: CSA2 reuse (ratio 1: layer 24's picks)
}
