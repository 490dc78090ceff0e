package views

// registry lists every view; a new view is one file plus one line here.
var registry = []View{
	{Name: "source", About: "the checkpoint as it is, served unchanged", build: buildSource},
	{Name: "nvfp4", About: "routed experts MXFP4 -> NVFP4 (lossless) as vLLM, SGLang and TensorRT-LLM load NVIDIA's build; everything else as is", Options: nvfp4Options, build: safetensorsView(nvfp4Rewrites)},
	{Name: "engram-fp4", About: "Engram tables FP8 -> FP4 with block-32 E8M0 scales, everything else as is", build: safetensorsView(engramRewrites)},
	{Name: "nvfp4+engram-fp4", About: "both transcodes at once (the seed script's default output)", build: safetensorsView(nvfp4Rewrites, engramRewrites)},
	{Name: "trace", About: "DeepSeek MLA + MoE decoder-layer forwards on prompts, run when read: activations, routes, statistics", Options: traceOptions, Transient: true, build: buildTrace},
	{Name: "q2", About: "routed experts -> ggml IQ2_XXS (w1, w3) and Q2_K (w2), with plan, manifests and README", build: buildQ2},
	{Name: "gguf", About: "GGUF files for llama.cpp, LM Studio and ollama (deepseek2 BF16, Q8_0, IQ2_XXS; deepseek4 MXFP4, IQ2_XXS), single and split", Options: ggufOptions, build: buildGGUF},
	{Name: "manifest", About: "the inventory of every tensor: formats, bytes, sha256, value checks, where each view's tensors come from", Options: manifestOptions, build: buildManifest},
}

// Names lists the registered views in order.
func Names() []string {
	names := make([]string, len(registry))
	for i, v := range registry {
		names[i] = v.Name
	}
	return names
}

// All returns the registered views.
func All() []View { return append([]View(nil), registry...) }
