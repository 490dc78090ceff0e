// Package trace records what DeepSeek decoder layers do with a handful of
// prompts, as the seed script trace_v2_lite.py did on a GPU, for every
// model family dsfs runs.
//
// The package is the core; each family is a package of its own that
// implements Family and registers itself for the checkpoint families it
// runs (deepseek2: V2, V2-Lite, V3, R1; deepseek4: V4-Flash; deepseek41:
// V4.1-Flash), as image formats register with package image. A program
// that traces imports the families it wants for their effect, and finds
// a checkpoint's with Lookup(cat.Config.Family).
//
// A family opens a checkpoint's Model (its config, then the layers'
// tensors, with the problems that keep layers from running) and traces
// prompts through it with a Tracer. Every family's tracer is a Core, the
// generic memo this package provides: it runs layers on demand, one at a
// time, keeps the state entering every computed layer (so reading layer N
// runs only the layers not yet run), every layer's record and the full
// outputs of the two most recent layers, and stops a forward when every
// reader waiting for it has gone. The family supplies the engine (embed,
// forward, head) and a Spec: how its state starts and passes on, what it
// records of a layer and which activations it serves.
//
// What a trace serves is the same for every family (Files): prompts.json,
// trace.json (the family's report of the whole trace, Spec.Report), a
// record (layers/NN.json) and a safetensors file of raw
// activations (layers/NN.safetensors) per runnable layer, the logits where
// the family runs its head, pictures of the routes drawn by package
// figures (a load chart per routing layer, a route map per prompt), and
// ERROR.txt listing what cannot run. Sizes
// of the safetensors files follow from the config and the prompts alone,
// so a view can lay them out before anything runs; Cost estimates the memory a set of
// prompts will hold, so a view can refuse it first (Within).
//
// The records hold the seed's statistics for every family (hidden-state
// statistics, expert load with its gini, entropy and effective experts,
// per-token routes with decoded pieces, prompt-pair Jaccard overlaps:
// Routing), and each family adds its own: MLA's latent and cache
// arithmetic for V2/V3, hyper-connection coefficients, keys attended and
// indexer picks for V4, CSA2 roles, candidate blocks and Engram lookups
// for V4.1.
package trace
