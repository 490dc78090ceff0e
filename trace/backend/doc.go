// Package backend is what trace/'s engines run a decoder layer's
// operations on: the Backend interface, shaped for device memory (the
// engine allocates buffers, uploads inputs and weights, queues operations
// and downloads what it must see on the host), the CPU backend on simd's
// kernels, the optional operations a backend may add for the V4 family
// (V4Ops, V41Ops), and the --device option every family takes alike
// (Start).
//
// A GPU backend (package cuda) implements the same interface and is
// loaded at run time; a build without CUDA runs everything here.
package backend
